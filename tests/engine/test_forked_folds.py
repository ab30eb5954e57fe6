"""engine.forked_folds: the folds in a forked child beside the decode give the findings, coverage,
reference time and internal errors of one process - on every log dir and capture of the corpus, forced on
whatever their size, the child sharing its buffered folds with a child of its own -, a fold that fails in the child fails the audit with its own error, and a
child that dies is said, never taken for a clean audit. Each check runs in a fresh interpreter
(no other thread alive, as in a command; pytest's process may hold a Spark session's threads)."""

from __future__ import annotations

import textwrap

import pytest

from tests.conftest import CORPUS
from tests.engine import fresh

COMMON = """
import json, os, sys
from pathlib import Path
from kaudit.engine import forked_folds, local, shared_folds

forks = []
real = forked_folds.run_forked
def counted(work, chunks, finish, *rest, **kw):
    forks.append(1)
    return real(work, chunks, finish, *rest, **kw)
local.run_forked = counted
"""


def _script(body: str) -> dict:
    return fresh.run(COMMON + textwrap.dedent(body))


# each side's inputs on the corpus, how one is audited, and the threshold that forces the fork
SIDES = {
    "log dirs": ("""sorted({m.parent.parent.parent if m.parent.name in ("data", "meta") else m.parent
                         for m in corpus.rglob("meta.properties")})""",
                 "local.audit_segments([str(x)], jobs=None)", "FORK_MIN_BYTES", 10),
    "captures": ("""sorted(p for p in corpus.rglob("*") if p.suffix in (".pcap", ".pcapng"))[:40]""",
                 "local.audit_pcaps([str(x)], PcapOptions())", "FORK_MIN_CAPTURE_BYTES", 20),
}


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS} (CI provides ../shared/corpus)")
@pytest.mark.parametrize("side", list(SIDES))
def test_forked_folds_find_what_one_process_finds_on_the_corpus(side):
    inputs, audit, knob, least = SIDES[side]
    got = _script(f"""
        from kaudit.sources.pcap import PcapOptions
        corpus = Path({str(CORPUS)!r})
        inputs = {inputs}
        def runs():
            out = []
            for x in inputs:
                r = {audit}
                out.append((str(x), r.findings, r.internal_errors, r.coverage, r.reference_time_ms, r.errors))
            return out
        forked_folds.{knob} = 1 << 60
        one = runs()
        assert not forks
        forked_folds.{knob} = 0
        shared_folds.SHARE_MIN_ROWS = 0   # the child shares its buffered folds with a child of its own
        two = runs()
        bad = [a[0] for a, b in zip(one, two) if json.dumps(a, default=str) != json.dumps(b, default=str)]
        print(json.dumps({{"inputs": len(one), "forked": len(forks), "bad": bad,
                          "findings": sum(len(a[1]) for a in one)}}))
    """)
    assert got["bad"] == []
    assert got["inputs"] >= least and got["findings"] > 10
    assert got["forked"] == got["inputs"]


def test_a_fold_that_fails_or_a_child_that_dies_fails_the_audit():
    got = _script("""
        import pyarrow as pa
        from kaudit.audit.folds import Fold, KeyedState
        from kaudit.engine import plan

        parent = os.getpid()

        class G:
            def __init__(self, key, mode):
                self.key, self.mode, self.n = key, mode, 0
            def feed(self, kind, t):
                self.n += t.num_rows
                if os.getpid() != parent and self.mode == "raise" and self.n > 100:
                    raise KeyError("a fold that fails in the child")
                if os.getpid() != parent and self.mode == "die" and self.n > 100:
                    os._exit(9)
                return []
            def finish(self):
                return [{"rule": "g", "key": self.key[0], "rows": self.n}]

        def run(mode, n=200):
            fold = Fold("g", {"index_entry": ("k",)}, ("k",), (), lambda ctx: KeyedState(("k",), lambda k: G(k, mode)))
            audit = plan.Audit("disk", [], (fold,), None, lambda f: True)
            chunks = (("index_entry", pa.table({"k": [i // 50] * 50})) for i in range(n))
            try:
                findings, facts, internal = forked_folds.run_forked(plan.Work(audit), chunks, lambda w: w.finish())
                return findings
            except Exception as e:
                return [type(e).__name__, str(e)]

        print(json.dumps({"clean": run("ok"), "failing": run("raise"), "dying": run("die"),
                          "alive": os.getpid() == parent}))
    """)
    assert got["clean"] == [{"rule": "g", "key": k, "rows": 2500} for k in range(4)]
    assert got["failing"] == ["KeyError", "'a fold that fails in the child'"]
    assert got["dying"][0] == "FoldsProcessDied"


def test_the_fork_is_chosen_only_for_a_decode_in_python(monkeypatch):
    import threading
    from types import SimpleNamespace

    from kaudit.engine import forked_folds as ff

    monkeypatch.setattr(ff, "usable_cpus", lambda: 2)

    def audit(side="disk", tap=None, **sizes):
        targets = [SimpleNamespace(kind="log", topic=t, size=n) for t, n in sizes.items()]
        return SimpleNamespace(side=side, tap=tap, layout=SimpleNamespace(targets=targets))

    alone = threading.active_count() == 1   # pytest's process may hold a Spark session's threads
    big = 1 << 30
    assert ff.should_fork(audit(__transaction_state=9 << 20), None) is alone
    assert ff.should_fork(audit(__consumer_offsets=9 << 20), 2) is alone
    assert not ff.should_fork(audit(orders=big, __transaction_state=1 << 20), None)  # compiled decode
    assert not ff.should_fork(audit(__transaction_state=big), 1)               # --jobs 1: one process
    assert not ff.should_fork(audit(tap=print, __transaction_state=big), None)  # a tap: this process's
    assert not ff.should_fork(audit("wire", __transaction_state=big), None)   # no capture's size known
    monkeypatch.setattr(ff, "usable_cpus", lambda: 1)
    assert not ff.should_fork(audit(__transaction_state=big), None)


def test_the_fork_is_chosen_for_a_big_capture_decoded_in_one_process(monkeypatch, tmp_path):
    import threading
    from types import SimpleNamespace

    from kaudit.engine import forked_folds as ff
    from kaudit.sources.pcap import PcapOptions

    monkeypatch.setattr(ff, "usable_cpus", lambda: 2)
    monkeypatch.delenv(ff.MIN_BYTES_ENV, raising=False)
    for env in ("KAUDIT_PCAP_JOBS", "KAUDIT_JOBS"):
        monkeypatch.delenv(env, raising=False)
    big, small = tmp_path / "big.pcap", tmp_path / "small.pcap"
    with open(big, "wb") as f:
        f.truncate(ff.FORK_MIN_CAPTURE_BYTES)   # sparse: its size is all that is read
    small.write_bytes(b"\0" * 100)

    def audit(*paths, tap=None, **options):
        return SimpleNamespace(side="wire", tap=tap, layout=None, paths=[str(p) for p in paths],
                               options=PcapOptions(**options))

    alone = threading.active_count() == 1
    assert ff.should_fork(audit(big), None) is alone
    assert ff.should_fork(audit(small, small), None, min_bytes=200) is alone
    assert not ff.should_fork(audit(small), None)
    assert not ff.should_fork(audit(big), 1)                        # --jobs 1
    assert not ff.should_fork(audit(big, tap=print), None)          # a tap: this process's
    assert not ff.should_fork(audit(big, jobs=2), None)             # pcap workers: forked beside the pipe's thread
    assert not ff.should_fork(audit(tmp_path / "gone.pcap"), None)  # the decode says what is missing
