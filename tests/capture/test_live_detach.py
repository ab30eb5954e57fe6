"""capture.live._detach_half: the compiled history's `detach` and the deque path give the same
history - the window's entries copied out as (offset, bytes), the newest kept up to the limit."""

from __future__ import annotations

import random
from collections import deque
from types import SimpleNamespace

import pytest

from kaudit import native
from kaudit.capture import live
from kaudit.capture.tcp import PACK_OFF, PACK_POS

C = native.module("kaudit.capture._cstreams")


def _entries(rng, buf_len):
    out = []
    off = 0
    for _ in range(rng.randrange(0, 300)):
        n = rng.randrange(1, 3000)
        pos = rng.randrange(0, buf_len - n)
        kind = rng.random()
        if kind < 0.6:
            out.append(("packed", off, pos, n))
        elif kind < 0.8:
            out.append(("view", off, pos, n))
        else:
            out.append(("bytes", off, pos, n))
        off += n
    return out


def _fill(hist, entries, buf, compiled):
    for kind, off, pos, n in entries:
        if kind == "packed":
            x = (off << PACK_OFF) | (pos << PACK_POS) | n
            if compiled:
                hist.add(off, pos, n)
            else:
                hist.append(x)
        elif kind == "view":
            hist.append((off, memoryview(buf)[pos:pos + n]))
        else:
            hist.append((off, bytes(buf[pos:pos + n])))


@pytest.mark.skipif(C is None or not hasattr(C.History, "add"), reason="the compiled core is not built")
@pytest.mark.parametrize("seed", range(30))
def test_compiled_and_pure_detach_agree(seed, monkeypatch):
    rng = random.Random(seed)
    buf = bytes(rng.randrange(256) for _ in range(1 << 16))
    monkeypatch.setattr(live, "LIVE_HISTORY_BYTES", rng.choice([1, 5000, 64 << 10, 1 << 30]))
    entries = _entries(rng, len(buf))
    pure = SimpleNamespace(history=deque(maxlen=256), pending=[])
    comp = SimpleNamespace(history=C.History(), pending=[])
    _fill(pure.history, entries, buf, False)
    _fill(comp.history, entries, buf, True)
    for _ in range(2):   # a second detach of the same window changes nothing
        live._detach_half(pure, buf)
        live._detach_half(comp, buf)
        got_pure, got_comp = list(pure.history), list(comp.history)
        assert got_pure == got_comp
        assert all(type(d) is bytes for _, d in got_pure)
