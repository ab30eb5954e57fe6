"""consumer-reset-skip as Kafka answers an out-of-range Fetch: ReplicaManager.createLogReadResult
gives the error's partition high watermark, last stable offset and log start -1, so the records
under the log start (deleted by retention before the reset) are known only from the answer at
the log end. Found by the history simulator (tests/sim, group:reset_range)."""

from __future__ import annotations

from tests.audit.wire import wirecraft_group as g
from tests.audit.wire.wirecraft import audit
from tests.sources.pcap.craft import Conn

RULES = ("consumer-reset-skip",)
A = dict(client=("10.0.0.4", 41001))


def _restart(committed: int):
    return (g.join(1, "app-a", "m-a", 1) + g.sync(2, "app-a", "m-a", 1, [(g.TOPIC, [0])])
            + g.offset_fetch(3, "app-a", committed))


def _brief(fs):
    return [(f["rule"], f["severity"], f["first_offset"], f["last_offset"]) for f in fs]


def test_the_skip_starts_at_the_log_start_the_answer_at_the_log_end_gives(tmp_path):
    """Committed 3, retention moved the log start to 20, the log end is 50: the reset skipped
    20-49; 3-19 were gone before it (Kafka's error answer says log start -1)."""
    out_of_range = g.fetch(4, "app-a", 3, b"", hw=-1, error=1, log_start=-1)
    end = g.fetch(6, "app-a", 50, b"", hw=50, log_start=20)
    fs = audit(tmp_path, Conn(_restart(3) + out_of_range + g.list_offsets(5, "app-a", -1, 50) + end, **A),
               select=RULES)
    assert _brief(fs) == [("consumer-reset-skip", "error", 20, 49)]


def test_an_error_answer_with_its_log_start_keeps_it(tmp_path):
    out_of_range = g.fetch(4, "app-a", 3, b"", hw=50, error=1, log_start=10)
    end = g.fetch(6, "app-a", 50, b"", hw=50, log_start=20)
    fs = audit(tmp_path, Conn(_restart(3) + out_of_range + g.list_offsets(5, "app-a", -1, 50) + end, **A),
               select=RULES)
    assert _brief(fs) == [("consumer-reset-skip", "error", 10, 49)]


def test_retention_past_the_log_end_skips_nothing(tmp_path):
    """Everything up to the log end was deleted: the reset jumps over no record."""
    out_of_range = g.fetch(4, "app-a", 3, b"", hw=-1, error=1, log_start=-1)
    end = g.fetch(6, "app-a", 50, b"", hw=50, log_start=50)
    fs = audit(tmp_path, Conn(_restart(3) + out_of_range + g.list_offsets(5, "app-a", -1, 50) + end, **A),
               select=RULES)
    assert fs == []
