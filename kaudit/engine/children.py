"""The engines' forked children once their results are in: reaped without waiting for their
exit (freeing a fold's selections takes ~15-40 ms), or killed when the parent gives up. A module
of its own: the main process needs it before its decode, without the audit's modules."""

from __future__ import annotations

import atexit
import os
import signal

_ENDING: list[int] = []   # children whose results are in, not yet reaped


def reap(pid: int) -> None:
    """Reaps a child whose results are in if it has exited; else once it has (the next sharing
    or forked folds, or the process's exit): the main process need not wait for its exit to go on."""
    try:
        ended, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return
    if not ended:
        atexit.unregister(reap_ending)   # registered once
        atexit.register(reap_ending)
        _ENDING.append(pid)


def reap_ending() -> None:
    while _ENDING:
        wait_child(_ENDING.pop())


def wait_child(pid: int) -> int | None:
    """The child's wait status once it has ended (None: already reaped)."""
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return None


def kill_child(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    wait_child(pid)
