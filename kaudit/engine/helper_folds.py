"""A capture's buffered folds on two cores without copy-on-write: the folds' child
(engine.forked_folds) forks a helper before the first chunk, and while the main process decodes
it sends the helper the selections of some folds as it makes them; once the decode ends both fold
at once - the helper the folds it was sent, the child the others, then whatever the helper has not
taken yet (the child keeps every selection).

Why: sharing the folds with a child forked at the end (engine.shared_folds) costs copy-on-write -
every page either process writes that existed at the fork is copied first, and the second
process's heap starts cold (~3 us a page fault on this virtual machine; the bench capture's folds
took ~35k faults, ~0.1 s of CPU, against ~10k in one process). A helper forked while the child is
small has its own heap, warmed by the selections it receives during the decode, when the second
core is mostly idle (the child used ~0.25 s of CPU during the bench capture's ~0.7 s decode).

What is sent: the folds with the most estimated CPU per byte of selection (Fold.cost x rows /
bytes; the transactions' replay is ~50x the Arrow folds' per byte), until the estimate reaches
SHARE of all the folds' - decided again after every chunk once DECIDE_ROWS rows are selected (a
fold chosen later is sent what it selected before). The bench capture: wire-txn, wire-produce and
wire-lso, ~23 MB of its ~120 MB of selections.

The helper's tasks at the end are shared_folds' (tasks_of: biggest first, a per-key fold cut in
key ranges where that shortens the end, the child counted busy with its own folds, which it runs
whole): they go through a pipe of task numbers that the child also reads once its own are done (one byte a task: a read is atomic, no task is taken twice). The
findings and internal errors are the ones `Work.run_folds` gives, in the folds' order. A helper
that dies or fails a task sends nothing for it: the child runs it (and so raises its error, if
it has one); a helper gone before the end leaves the folds to shared_folds.

The helper holds a copy of its folds' selections (the bench capture: ~23 MB besides the child's
~230 MB), at most MAX_SENT_BYTES: past it the helper is let go and the folds are shared at the
end as before. Started only for the wire audit (measured there; the disk audit's forked folds share at the end)
where sharing is safe: Linux, 2+ usable CPUs, `--jobs` not 1, no other thread alive, 2+ buffered
folds."""

from __future__ import annotations

import os
import signal
import threading

from kaudit.audit.folds import weighed
from kaudit.engine import shared_folds
from kaudit.engine.children import kill_child, reap
from kaudit.sources.pcap_workers import recv_parts, send, widen

SHARE = 0.5          # the share of the estimated fold CPU sent to the helper
DECIDE_ROWS = 20_000   # rows selected before the first choice (each fold's share needs a sample)
# the helper holds a copy of what it is sent (the child keeps its own: it takes the helper's
# tasks, and runs them if the helper dies); past this much the helper is let go and the folds
# are shared at the end (shared_folds: copy-on-write, no copy)
MAX_SENT_BYTES = 512 << 20
_RUN = "run"


def should_start(work, jobs: int | None) -> bool:
    return getattr(work.audit, "side", None) == "wire" and len(work.audit.buffered) >= 2 and shared_folds.can_fork(jobs)


class Helper:
    """The folds' child's end of its helper."""

    def __init__(self, work, close: tuple[int, ...] = ()):
        """Forks the helper; `close`: this process's descriptors the helper must not hold (the
        main process's pipes: its end of them must see this process's end alone)."""
        self.folds = list(work.audit.buffered)
        sel_r, self.sel_w = os.pipe()
        widen(self.sel_w)
        self.tokens_r, tokens_w = os.pipe()
        results_r, results_w = os.pipe()
        widen(results_w)
        pid = os.fork()
        if pid == 0:   # the helper: never returns
            for fd in (self.sel_w, tokens_w, results_r, *close):
                os.close(fd)
            _helper(work, sel_r, self.tokens_r, results_w)
        os.close(sel_r)
        os.close(results_w)
        self.pid, self.tokens_w, self.results_r = pid, tokens_w, results_r
        self.sent: dict[str, int] = {}                      # fold name -> its selection's items sent
        self.counted = {f.name: 0 for f in self.folds}      # its items counted in rows and bytes
        self.rows = {f.name: 0 for f in self.folds}
        self.bytes = {f.name: 0 for f in self.folds}
        self.dead = False
        self.stopped = False

    def forward(self, work) -> None:
        """After a chunk's selections: the helper's folds' new ones sent (a fold chosen now, all
        it selected so far)."""
        if self.dead:
            return
        for f in self.folds:
            items = work.selected[f.name]
            for kind, t in items[self.counted[f.name]:]:
                self.rows[f.name] += weighed(f, kind, t)
                self.bytes[f.name] += t.nbytes
            self.counted[f.name] = len(items)
        if sum(self.rows.values()) >= DECIDE_ROWS:
            self._choose()
        if sum(self.bytes[name] for name in self.sent) > MAX_SENT_BYTES:
            self.dead = True   # its copies would cost too much memory: the child shares at the end
            self.stop()
            return
        for name, n in self.sent.items():
            items = work.selected[name]
            if len(items) > n and self._send(("sel", name, items[n:])):
                self.sent[name] = len(items)

    def _choose(self) -> None:
        est = {f.name: getattr(f, "cost", 1.0) * self.rows[f.name] for f in self.folds}
        budget = SHARE * sum(est.values())
        taken = sum(est[n] for n in self.sent)
        for name in sorted(est, key=lambda n: -est[n] / max(self.bytes[n], 1)):
            if name not in self.sent and est[name] and taken + est[name] <= budget:
                self.sent[name] = 0
                taken += est[name]

    def _send(self, message) -> bool:
        try:
            send(self.sel_w, message)
            return True
        except OSError:   # EPIPE: the helper is gone
            self.dead = True
            return False

    def run(self, work, folds) -> list[dict]:
        """`Work.run_folds(folds)`, shared with the helper (the module's docstring)."""
        folds = list(folds)
        theirs = [f for f in folds if f.name in self.sent]
        mine = [f for f in folds if f.name not in self.sent]
        # the child takes the helper's tasks once its own are done: a fold cut in key ranges
        # where that ends sooner even so
        tasks = shared_folds.tasks_of(work, theirs, busy=sum(shared_folds.estimates(work, mine)))
        kinds = {f.name: work.facts.kinds.get(f.name, set()) for f in theirs}
        if self.dead or not theirs or len(tasks) > 255 or not self._send((_RUN, work.ctx, kinds, tasks)):
            self.stop()
            return (shared_folds.run_shared if shared_folds.should_share(work, None) else type(work).run_folds)(
                work, folds)
        self.stopped = True   # its pipes closed here from now on
        os.close(self.sel_w)
        os.write(self.tokens_w, bytes(range(len(tasks))))   # < 64 KiB: the pipe holds them all
        os.close(self.tokens_w)
        received: list[tuple] = []
        reader = threading.Thread(target=shared_folds.receive, args=(self.results_r, received), daemon=True)
        reader.start()
        own = [(i, 0, 1) for i in range(len(mine))]   # only it runs them: whole, never cut in ranges
        cut: dict = {}
        try:
            done = {("mine", t): shared_folds.run_task(work, mine, t, {}) for t in own}
            while (t := shared_folds.take(self.tokens_r)) is not None:
                done[("theirs", tasks[t])] = shared_folds.run_task(work, theirs, tasks[t], cut)
            reader.join()
            reap(self.pid)
            self.pid = None
        finally:
            os.close(self.tokens_r)
            if self.pid is not None:   # this process failed (or Ctrl-C): the helper's work is moot
                kill_child(self.pid)
        for t, found, internal in received:
            done.setdefault(("theirs", tasks[t]), (found, internal))
        return _in_order(work, folds, {"mine": (mine, own), "theirs": (theirs, tasks)}, done, cut)

    def stop(self) -> None:
        """The helper ended unused (its pipes closed: it exits). Once: a descriptor closed twice
        may be another file's by then."""
        if self.stopped:
            return
        self.stopped = True
        for fd in (self.sel_w, self.tokens_w, self.tokens_r, self.results_r):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.pid is not None:
            kill_child(self.pid)
            self.pid = None


def _in_order(work, folds, sides: dict, done: dict, cut: dict) -> list[dict]:
    """The tasks' findings in the folds' order (ranges in key order), the internal errors added
    in that order; a task the helper did not send is run here. `sides`: each side's (folds,
    tasks)."""
    out = []
    for f in folds:
        side = "theirs" if f in sides["theirs"][0] else "mine"
        fl, tasks = sides[side]
        for task in sorted(t for t in tasks if t[0] == fl.index(f)):
            found, internal = done[(side, task)] if (side, task) in done else \
                shared_folds.run_task(work, fl, task, cut)
            out.extend(found)
            work.internal.extend(internal)
    for f in folds:
        work.selected.pop(f.name, None)
    return out


def _helper(work, sel: int, tokens: int, results: int) -> None:
    """The helper's life (never returns): the selections it is sent, then its share of the
    tasks (shared_folds.serve). Ended by the child's end of the pipe (EOF: it is gone, or the
    helper went unused), or by any error before its tasks: the child runs them."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)   # Ctrl-C ends it at once, no traceback
        with os.fdopen(sel, "rb", buffering=1 << 20) as f:
            while (message := recv_parts(f))[0] != _RUN:
                work.selected[message[1]].extend(message[2])
        _, work.ctx, kinds, tasks = message
        work.facts.kinds.update(kinds)
        folds = [f for f in work.audit.buffered if f.name in kinds]
    except BaseException:   # noqa: BLE001 - never back into the child's code
        os._exit(1)
    shared_folds.serve(work, folds, tasks, {}, tokens, results)
