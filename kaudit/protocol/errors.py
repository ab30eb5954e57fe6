"""Typed decode errors. Decoders are strict inside; sources turn these into issue rows."""


class DecodeError(Exception):
    """Bytes that do not decode. `position` is the absolute byte offset where decoding failed."""

    kind = "corrupt"

    def __init__(self, message: str, position: int = -1):
        super().__init__(message)
        self.message = message
        self.position = position


class Truncated(DecodeError):
    """The buffer ends before the structure does: more data is needed (or the input was cut)."""

    kind = "truncated"

    def __init__(self, message: str, position: int = -1, needed: int = 0):
        super().__init__(message, position)
        self.needed = needed


class LimitExceeded(DecodeError):
    """A length from the input asks for more than the configured bound (never allocated)."""

    kind = "limit"
