"""engine.helper_folds: the wire audit's buffered folds shared with a helper the folds' child
forks before the first chunk give the findings, coverage and internal errors of one process - on
the corpus's captures, with the folds sent as chosen and with every fold sent (the child then
takes the helper's tasks once its own are done) - and a helper that fails a fold or dies costs
nothing but time. Each check runs in a fresh interpreter (no other thread alive, as in a command)."""

from __future__ import annotations

import textwrap

import pytest

from tests.conftest import CORPUS
from tests.engine import fresh

COMMON = """
import json, os, sys
from pathlib import Path
from kaudit.engine import forked_folds, helper_folds, local, plan, shared_folds

import tempfile
LOG = tempfile.mktemp()
def used():   # the folds each run sent its helper (Helper.run runs in the folds' child: told in a file)
    return [json.loads(x) for x in open(LOG)] if os.path.exists(LOG) else []
real_run = helper_folds.Helper.run
def counted(self, work, folds):
    with open(LOG, "a") as f:
        print(json.dumps(sorted(self.sent)), file=f)
    return real_run(self, work, folds)
helper_folds.Helper.run = counted
real_helper = helper_folds._helper
def marked(*a):
    os.environ["KAUDIT_TEST_HELPER"] = "1"   # this process is the helper
    real_helper(*a)
helper_folds._helper = marked
"""


def _script(body: str) -> dict:
    return fresh.run(COMMON + textwrap.dedent(body))


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS} (CI provides ../shared/corpus)")
def test_the_helper_finds_what_one_process_finds_on_the_corpus():
    got = _script(f"""
        from kaudit.sources.pcap import PcapOptions
        caps = sorted(p for p in Path({str(CORPUS)!r}).rglob("*") if p.suffix in (".pcap", ".pcapng"))[:40]
        def runs():
            out = []
            for c in caps:
                r = local.audit_pcaps([str(c)], PcapOptions())
                out.append((str(c), r.findings, r.internal_errors, r.coverage, r.reference_time_ms, r.errors))
            return out
        forked_folds.FORK_MIN_CAPTURE_BYTES = 1 << 60
        one = runs()
        assert not used()
        forked_folds.FORK_MIN_CAPTURE_BYTES = 0
        helper_folds.DECIDE_ROWS = 0
        chosen = runs()
        n_chosen = len(used())
        helper_folds.SHARE = 1.0   # every fold sent: the child takes the helper's tasks too
        everything = runs()
        bad = [a[0] for x in (chosen, everything) for a, b in zip(one, x)
               if json.dumps(a, default=str) != json.dumps(b, default=str)]
        print(json.dumps({{"inputs": len(one), "chosen": n_chosen, "all": len(used()) - n_chosen, "bad": bad,
                          "sent": used()[:n_chosen], "findings": sum(len(a[1]) for a in one)}}))
    """)
    assert got["bad"] == []
    assert got["inputs"] >= 20 and got["findings"] > 10
    assert got["chosen"] >= 15 and got["all"] >= 15   # captures whose selections reached a helper
    assert any("wire-txn" in s for s in got["sent"])


def test_a_helper_that_fails_or_dies_leaves_its_folds_to_the_child():
    got = _script("""
        import pyarrow as pa
        from kaudit.audit.folds import Fold, KeyedState

        class G:
            def __init__(self, key, name, mode):
                self.key, self.name, self.mode, self.n = key, name, mode, 0
            def feed(self, kind, t):
                self.n += t.num_rows
                return []
            def finish(self):
                if os.environ.get("KAUDIT_TEST_HELPER") and self.mode == "raise":
                    raise RuntimeError("a fold that fails in the helper only")
                if os.environ.get("KAUDIT_TEST_HELPER") and self.mode == "die":
                    os._exit(9)
                return [{"rule": self.name, "key": self.key[0], "rows": self.n}]

        def fold(name, mode, cost):
            return Fold(name, {"batch": ("k",)}, ("k",), (), lambda ctx: KeyedState(("k",), lambda k: G(k, name, mode)),
                        per_key=True, cost=cost)

        def run(modes):
            folds = tuple(fold(f"f{i}", m, 1.0 + i) for i, m in enumerate(modes))
            audit = plan.Audit("wire", [], folds, None, lambda f: True)
            chunks = (("batch", pa.table({"k": [i % 2] * 50})) for i in range(40))
            findings, facts, internal = forked_folds.run_forked(plan.Work(audit), chunks, lambda w: w.finish(),
                                                                share=True)
            return findings

        helper_folds.DECIDE_ROWS = 0
        helper_folds.SHARE = 1.0
        got = {"clean": run(["ok"] * 3), "failing": run(["raise", "ok", "raise"]), "dying": run(["die"] * 3),
               "helped": len(used())}
        helper_folds.MAX_SENT_BYTES = 0   # let go at once: the folds shared at the end
        got["let_go"] = run(["ok"] * 3)
        got["helped_after"] = len(used())
        print(json.dumps(got))
    """)
    want = [{"rule": f"f{i}", "key": k, "rows": 1000} for i in range(3) for k in (0, 1)]
    assert got["clean"] == want and got["failing"] == want and got["dying"] == want
    assert got["let_go"] == want
    assert got["helped"] == 3 and got["helped_after"] == 4   # (Helper.run ran, and fell back)


def test_the_helper_is_sent_the_folds_with_the_most_cpu_per_byte():
    from types import SimpleNamespace

    from kaudit.engine import helper_folds as hf

    helper = object.__new__(hf.Helper)   # the choice alone: no process forked
    helper.folds = [SimpleNamespace(name=n, cost=c) for n, c in (("txn", 10.0), ("big", 0.3), ("mid", 1.0))]
    helper.rows = {"txn": 1000, "big": 20000, "mid": 4000}        # estimates 10000, 6000, 4000
    helper.bytes = {"txn": 1 << 10, "big": 1 << 24, "mid": 1 << 20}
    helper.sent = {}
    helper._choose()
    assert helper.sent == {"txn": 0}   # 10000 of 20000: half; the next would pass it
    helper.rows["big"] = 100000        # big's estimate grows: 30000 of 44000
    helper._choose()
    assert helper.sent == {"txn": 0, "mid": 0}   # mid joins (14000 of 44000); big would pass half
