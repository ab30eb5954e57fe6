"""The compiled core (Cython extension modules built by `pip install`) and its pure-Python
reference: one interface, two implementations, chosen at import.

    from kaudit import native
    c = native.module("kaudit.protocol._cbatch")   # the extension, or None for the pure path

`KAUDIT_PURE=1` in the environment forces the pure path. An extension that cannot be imported
(not built: no compiler at install time, a Python without headers) leaves kaudit on the pure
path and says so once on stderr. Both paths give the same rows and findings (the tests run
both); the compiled one is only faster. `pure(True)` switches a running process over, for the
tests that compare the two.
"""

from __future__ import annotations

import importlib
import os
import sys
from contextlib import contextmanager

_FORCED = os.environ.get("KAUDIT_PURE", "").strip() not in ("", "0")
_loaded: dict[str, object] = {}
_missing: list[str] = []
_warned = False
_pure = _FORCED


def module(name: str):
    """The compiled module `name`, or None when the pure path is in force or it cannot be
    imported (said once per process on stderr)."""
    if _pure:
        return None
    mod = _loaded.get(name)
    if mod is None and name not in _missing:
        try:
            mod = _loaded[name] = importlib.import_module(name)
        except ImportError as e:
            _missing.append(name)
            _warn(f"{name}: {e}")
    return mod


def _warn(why: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        print(f"kaudit: the compiled core is not available ({why}); running the pure-Python "
              "decoders (same results, slower). Reinstall with a C compiler and Python headers "
              "to build it.", file=sys.stderr)


def active() -> bool:
    """True when the compiled core is in use (every extension imports and none is refused)."""
    return not _pure and all(module(n) is not None for n in EXTENSIONS)


@contextmanager
def pure(on: bool = True):
    """Within the block, the pure path (on=True) or the compiled one (on=False) is in force."""
    global _pure
    before = _pure
    _pure = on
    try:
        yield
    finally:
        _pure = before


# every extension module of the compiled core (setup.py builds these)
EXTENSIONS = ("kaudit.protocol._cbatch", "kaudit.capture._cstreams", "kaudit.protocol._cframing",
              "kaudit.protocol._cwire", "kaudit.sources._ccolumns", "kaudit.sources._crows",
              "kaudit.sources._cpcap")
