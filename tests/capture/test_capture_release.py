"""A memory-mapped capture's read pages are released as CaptureStreams goes (bounded RSS); the
events are the same as from the bytes, including payload views read after their pages went."""

from __future__ import annotations

import mmap

from kaudit.capture import StreamData, streams
from kaudit.capture.streams import CaptureStreams
from tests.capture.bench_capture import build
from tests.capture.craft import event_tuple


def test_released_pages_give_the_same_events(tmp_path, monkeypatch):
    buf = build(3000, nconns=20)
    path = tmp_path / "x.pcap"
    path.write_bytes(buf)
    expected = [event_tuple(e) for e in CaptureStreams(buf).events()]

    calls = []
    real = streams._release
    monkeypatch.setattr(streams, "RELEASE_EVERY", 64 * 1024)
    monkeypatch.setattr(streams, "_release", lambda m, upto: (calls.append(upto), real(m, upto)))
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    events = list(CaptureStreams(mm).events())  # payload views kept until after the loop
    assert len(calls) >= len(buf) // (64 * 1024) - 1
    assert calls == sorted(calls)
    assert [event_tuple(e) for e in events] == expected
    assert sum(len(e.data) for e in events if isinstance(e, StreamData)) > 0
    del events
    mm.close()
