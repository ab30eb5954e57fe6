"""How many processes the local engine uses when the command line does not say (`--jobs`).

One machine's cores, for inputs big enough to repay starting the workers (each is a fresh
interpreter: ~0.3 s of start-up); one process below that. The rows and findings are the same
whatever the number (the parallel decoders put them back in the one-process order).
"""

from __future__ import annotations

import os

MIN_PARALLEL_BYTES = 64 << 20  # below this one process is as fast as several
MAX_JOBS = 4  # beyond this the main process (which merges, audits and writes) is the limit


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def auto_jobs(size: int, env: str = "KAUDIT_JOBS") -> int:
    """Processes for inputs of `size` bytes: the environment's `env` (a positive integer) when
    set, else 1 below MIN_PARALLEL_BYTES, else one per usable CPU, at most MAX_JOBS."""
    value = os.environ.get(env, "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    if size < MIN_PARALLEL_BYTES or os.name != "posix":
        return 1
    return max(1, min(usable_cpus(), MAX_JOBS))
