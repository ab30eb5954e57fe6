"""engine.shared_folds: the buffered folds shared with a forked child give the findings and the
internal errors of one process - on every capture and log dir of the corpus, forced on whatever
their size - and a child that dies or fails a fold costs nothing but time: the main process runs
what it did not send. Each check runs in a fresh interpreter (no other thread alive, as in a
command; pytest's process may hold a Spark session's threads)."""

from __future__ import annotations

import textwrap

import pytest

from tests.conftest import CORPUS
from tests.engine import fresh

COMMON = """
import json, os, sys
from pathlib import Path
from kaudit.engine import local, plan, shared_folds
from kaudit.sources.pcap import PcapOptions

PORTS = frozenset({9092, 9093, 9094})
shared = []
real = shared_folds.run_shared
def counted(work, folds):
    shared.append(len(folds))
    return real(work, folds)
local.run_shared = counted
"""


def _script(body: str) -> dict:
    return fresh.run(COMMON + textwrap.dedent(body))


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS} (CI provides ../shared/corpus)")
def test_shared_folds_find_what_one_process_finds_on_the_corpus():
    got = _script(f"""
        corpus = Path({str(CORPUS)!r})
        caps = sorted(p for p in corpus.rglob("*") if p.suffix in (".pcap", ".pcapng"))
        roots = sorted({{m.parent.parent.parent if m.parent.name in ("data", "meta") else m.parent
                        for m in corpus.rglob("meta.properties")}})
        def runs(jobs):
            out = []
            for c in caps:
                r = local.audit_pcaps([str(c)], PcapOptions(kafka_ports=PORTS, jobs=jobs))
                out.append((str(c), r.findings, r.internal_errors))
            for d in roots:
                r = local.audit_segments([str(d)], jobs=jobs)
                out.append((str(d), r.findings, r.internal_errors))
            return out
        one = runs(1)
        assert not shared
        shared_folds.SHARE_MIN_ROWS = 0
        # every per-key fold (the wire's) cut in key ranges; the disk's folds, none per key, shared
        # as the order says (one pass: the corpus's captures and log dirs cover both ways)
        shared_folds.SPLIT_GAIN = -1e9
        cuts, real_cut = [], shared_folds._cut
        shared_folds._cut = lambda *a, **k: cuts.append(1) or real_cut(*a, **k)
        two = runs(None)
        bad = [a[0] for a, b in zip(one, two) if a != b]
        print(json.dumps({{"inputs": len(one), "shared": len(shared), "cut": len(cuts), "bad": bad,
                          "findings": sum(len(a[1]) for a in one)}}))
    """)
    assert got["bad"] == []
    assert got["inputs"] >= 40 and got["findings"] > 100
    assert got["shared"] >= 40   # most inputs (those with rows for 2+ buffered folds) were shared: 49 of 60
    assert got["cut"] >= 10      # the captures' per-key folds, in key ranges


def test_a_child_that_fails_or_dies_leaves_the_folds_to_the_main_process():
    got = _script("""
        import pyarrow as pa
        from kaudit.audit.folds import Fold, KeyedState

        parent = os.getpid()

        class G:
            def __init__(self, key, name, mode):
                self.key, self.name, self.mode, self.n = key, name, mode, 0
            def feed(self, kind, t):
                self.n += t.num_rows
                return []
            def finish(self):
                if os.getpid() != parent and self.mode == "raise":
                    raise RuntimeError("a fold that fails in the child only")
                if os.getpid() != parent and self.mode == "die":
                    os._exit(9)
                return [{"rule": self.name, "key": self.key[0], "rows": self.n}]

        def fold(name, mode, per_key):
            return Fold(name, {"batch": ("k",)}, ("k",), (), lambda ctx: KeyedState(("k",), lambda k: G(k, name, mode)),
                        per_key=per_key)

        def run(modes, per_key=False):   # per_key: each fold's two keys folded apart
            folds = tuple(fold(f"f{i}", m, per_key) for i, m in enumerate(modes))
            audit = plan.Audit("disk", [], folds, None, lambda f: True)
            work = plan.Work(audit)
            for i in range(3):
                work.select("batch", pa.table({"k": [i % 2] * 50}))
            return work.finish(runner=shared_folds.run_shared), work.selected

        clean, left = run(["ok"] * 4)
        failing, _ = run(["ok", "raise", "ok", "raise", "ok"])
        dying, _ = run(["die"] * 6)
        split = [run(["ok"] * 4, True)[0], run(["ok", "raise", "ok", "raise", "ok"], True)[0], run(["die"] * 6, True)[0]]
        print(json.dumps({"clean": clean, "left": len(left), "failing": failing, "dying": dying, "split": split}))
    """)
    want = [{"rule": f"f{i}", "key": k, "rows": n} for i in range(6) for k, n in ((0, 100), (1, 50))]
    assert got["clean"] == want[:8] and got["left"] == 0
    assert got["failing"] == want[:10]
    assert got["dying"] == want
    assert got["split"] == [want[:8], want[:10], want]


def test_sharing_is_chosen_only_where_it_can_pay(monkeypatch):
    import threading
    from types import SimpleNamespace

    import pyarrow as pa

    from kaudit.engine import shared_folds as sf

    monkeypatch.setattr(sf, "usable_cpus", lambda: 2)
    folds = [SimpleNamespace(name=n) for n in ("a", "b", "c")]

    def work(*rows):
        sel = {f.name: [("batch", pa.table({"x": [0] * n}))] if n else [] for f, n in zip(folds, rows)}
        return SimpleNamespace(audit=SimpleNamespace(buffered=folds), selected=sel)

    alone = threading.active_count() == 1   # pytest's process may hold a Spark session's threads
    assert sf.should_share(work(60, 30, 30), None, min_rows=50) is alone
    assert sf.should_share(work(60, 30, 30), 2, min_rows=50) is alone
    assert not sf.should_share(work(60, 30, 30), 1, min_rows=50)    # --jobs 1: one process
    assert not sf.should_share(work(900, 30, 0), None, min_rows=50)  # the rest too small to pay
    assert not sf.should_share(work(900, 0, 0), None, min_rows=0)    # one fold: nothing to share
    folds[0].per_key = True   # ... unless its keys may be cut in ranges: half of it
    assert sf.should_share(work(900, 0, 0), None, min_rows=450) is alone
    assert not sf.should_share(work(900, 0, 0), None, min_rows=451)
    folds[0].per_key = False
    monkeypatch.setattr(sf, "usable_cpus", lambda: 1)
    assert not sf.should_share(work(60, 30, 30), None, min_rows=50)
    if alone:
        monkeypatch.setattr(sf, "usable_cpus", lambda: 2)
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        try:
            assert not sf.should_share(work(60, 30, 30), None, min_rows=50)   # a thread alive: no fork
        finally:
            stop.set()
            t.join()


def test_the_biggest_tasks_go_first_and_a_fold_bigger_than_the_rest_is_cut():
    from types import SimpleNamespace

    import pyarrow as pa

    from kaudit.engine import shared_folds as sf

    def work(*specs):   # (rows, cost, per_key) per fold
        folds = [SimpleNamespace(name=f"f{i}", cost=c, per_key=k) for i, (_, c, k) in enumerate(specs)]
        sel = {f.name: [("batch", pa.table({"x": [0] * n}))] for f, (n, _, _) in zip(folds, specs)}
        return SimpleNamespace(selected=sel), folds

    w, folds = work((100, 1.0, True), (50, 12.0, True), (300, 1.0, False), (10, 1.0, True))
    assert sf.tasks_of(w, folds) == [(1, 0, 1), (2, 0, 1), (0, 0, 1), (3, 0, 1)]   # 600, 300, 100, 10: none cut
    w, folds = work((1000, 1.0, True), (100, 1.0, False), (50, 1.0, True))
    assert sf.tasks_of(w, folds) == [(0, 0, 2), (0, 1, 2), (1, 0, 1), (2, 0, 1)]
    w, folds = work((1000, 1.0, False), (100, 1.0, True))   # the big one may not be cut
    assert sf.tasks_of(w, folds) == [(0, 0, 1), (1, 0, 1)]
