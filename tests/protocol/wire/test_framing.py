"""FrameSplitter: chunking independence, gaps, bad sizes, resync, coverage."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from wirebytes import TAGS0, cstring, frame, i16, i32, request_header, response_header, string

import pytest

from kaudit import native
from kaudit.protocol.wire import framing
from kaudit.protocol.wire.framing import BadSize, Frame, FrameSplitter, Gap, Incomplete, Skipped


@pytest.fixture(autouse=True, scope="module", params=["pure", "compiled"])
def implementation(request):
    """Every test runs on the pure FrameSplitter and on its compiled twin."""
    global FrameSplitter
    if request.param == "compiled":
        c = native.module("kaudit.protocol._cframing")
        if c is None:
            pytest.skip("the compiled core is not built")
        FrameSplitter = c.Splitter
    yield request.param
    FrameSplitter = framing.FrameSplitter


def api_versions_request(corr: int, client: str = "kaudit-test") -> bytes:
    # ApiVersions v3: header v2 (flexible) + client_software_name, _version, tags
    return frame(request_header(18, 3, corr, client, True) + cstring("kaudit") + cstring("1.0")
                 + TAGS0)


def metadata_request(corr: int, topics: int) -> bytes:
    # Metadata v1 (header v1): topics array of strings
    body = i32(topics) + b"".join(string(f"topic-{i}") for i in range(topics))
    return frame(request_header(3, 1, corr, "meta-client", False) + body)


def request_stream(n: int = 40, seed: int = 1) -> tuple[bytes, list[bytes]]:
    rnd = random.Random(seed)
    frames = []
    for corr in range(n):
        if rnd.random() < 0.5:
            frames.append(api_versions_request(corr))
        else:
            frames.append(metadata_request(corr, rnd.randint(0, 30)))
    return b"".join(frames), frames


def run(splitter: FrameSplitter, chunks, gaps: dict | None = None) -> list:
    """Feed chunks (with gap(length) calls after the chunk indexes in `gaps`) and finish."""
    events = []
    for i, c in enumerate(chunks):
        events += splitter.feed(c)
        if gaps and i in gaps:
            events += splitter.gap(gaps[i])
    return events + splitter.finish()


def split_at(data: bytes, cuts) -> list[bytes]:
    cuts = sorted(set(c for c in cuts if 0 < c < len(data)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


def covered(events) -> int:
    """Bytes accounted for: received frame bytes, gaps, skipped, incomplete."""
    total = 0
    for e in events:
        if isinstance(e, Frame):
            total += e.wire_size - (e.lost or 0)
        elif isinstance(e, Gap):
            total += e.length or 0
        elif isinstance(e, Skipped):
            total += e.length
        elif isinstance(e, Incomplete):
            total += e.received
    return total


def test_whole_bytewise_and_random_splits_give_identical_frames():
    data, frames = request_stream()
    whole = run(FrameSplitter(), [data])
    assert [e.payload for e in whole] == [f[4:] for f in frames]
    assert all(isinstance(e, Frame) and e.complete for e in whole)
    assert whole[0].offset == 0 and whole[-1].end == len(data)
    bytewise = run(FrameSplitter(), [data[i:i + 1] for i in range(len(data))])
    assert bytewise == whole
    rnd = random.Random(7)
    for _ in range(20):
        cuts = [rnd.randrange(len(data)) for _ in range(rnd.randint(1, 60))]
        assert run(FrameSplitter(), split_at(data, cuts)) == whole


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=4000), max_size=40))
def test_any_chunking_gives_identical_frames(cuts):
    data, _ = request_stream(25, seed=3)
    assert run(FrameSplitter(), split_at(data, cuts)) == run(FrameSplitter(), [data])


def test_gap_inside_a_frame_keeps_the_stream_in_step():
    a, b, c = api_versions_request(1), metadata_request(2, 20), api_versions_request(3)
    stream = a + b + c
    lost_at, lost = len(a) + 30, 50  # 50 bytes of b lost after its first 30
    chunks = [stream[:lost_at], stream[lost_at + lost:]]
    for chunking in (chunks, [bytes([x]) for x in chunks[0]] + [chunks[1]]):
        events = run(FrameSplitter(), chunking, gaps={len(chunking) - 2: lost})
        frames = [e for e in events if isinstance(e, Frame)]
        assert [f.complete for f in frames] == [True, False, True]
        assert frames[1].offset == len(a) and frames[1].size == len(b) - 4
        assert frames[1].lost == lost and frames[1].payload == b[4:30]
        assert frames[2].payload == c[4:] and frames[2].offset == len(a) + len(b)
        assert Gap(lost_at, lost) in events
        assert not any(isinstance(e, Skipped) for e in events)
        assert covered(events) == len(stream)


def test_gap_ending_exactly_at_a_frame_end_stays_in_step():
    a, b, c = api_versions_request(1), api_versions_request(2), api_versions_request(3)
    events = run(FrameSplitter(), [a + b[:10], c], gaps={0: len(b) - 10})
    frames = [e for e in events if isinstance(e, Frame)]
    assert [(f.complete, f.lost) for f in frames] == [(True, 0), (False, len(b) - 10), (True, 0)]
    assert covered(events) == len(a + b + c)


def test_gap_across_a_frame_boundary_resyncs_on_the_next_plausible_header():
    frames_ = [api_versions_request(i) for i in range(5)]
    stream = b"".join(frames_)
    start = len(frames_[0]) + 10  # inside frame 1 ...
    end = len(frames_[0]) + len(frames_[1]) + 7  # ... to inside frame 2
    events = run(FrameSplitter(), [stream[:start], stream[end:]], gaps={0: end - start})
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["Frame", "Frame", "Gap", "Skipped", "Frame", "Frame"]
    assert events[1].complete is False and events[1].lost == len(frames_[1]) - 10
    skipped = events[3]
    assert skipped.reason == "gap" and skipped.offset == end
    assert skipped.offset + skipped.length == len(b"".join(frames_[:3]))
    assert [e.payload for e in events[4:]] == [f[4:] for f in frames_[3:]]
    assert covered(events) == len(stream)


def test_gap_at_a_frame_boundary_and_unknown_gap_lengths():
    a, b, c = api_versions_request(1), metadata_request(2, 3), api_versions_request(3)
    events = run(FrameSplitter(), [a, c], gaps={0: len(b)})
    assert [type(e).__name__ for e in events] == ["Frame", "Gap", "Frame"]
    assert events[2].offset == len(a + b)
    events = run(FrameSplitter(), [a + b[:9], c], gaps={0: None})
    assert [type(e).__name__ for e in events] == ["Frame", "Frame", "Gap", "Frame"]
    assert events[1].complete is False and events[1].lost is None
    assert events[3].payload == c[4:]


def test_oversized_and_negative_sizes_are_reported_never_allocated():
    good = [api_versions_request(i) for i in range(3)]
    junk = i32(0x7FFFFFF0) + b"\x00" * 20  # a 2 GiB size: never allocated
    events = run(FrameSplitter(), [good[0] + junk + good[1] + good[2]])
    assert [type(e).__name__ for e in events] == ["Frame", "BadSize", "Skipped", "Frame", "Frame"]
    assert events[1] == BadSize(len(good[0]), 0x7FFFFFF0)
    assert events[2] == Skipped(len(good[0]), len(junk), "bad_size")
    events = run(FrameSplitter(max_size=40), [metadata_request(1, 10) + good[0]])
    assert isinstance(events[0], BadSize) and events[-1].payload == good[0][4:]
    events = run(FrameSplitter(), [i32(-5) + good[0]])
    assert events[0] == BadSize(0, -5) and events[-1].payload == good[0][4:]


def test_stream_joined_mid_connection_searches_for_the_first_header():
    frames_ = [metadata_request(i, 4) for i in range(4)]
    stream = b"".join(frames_)
    cut = 23  # inside the first frame
    events = run(FrameSplitter(synced=False), [stream[cut:]])
    assert events[0] == Skipped(0, len(frames_[0]) - cut, "start")
    assert [e.payload for e in events[1:]] == [f[4:] for f in frames_[1:]]
    # byte by byte: the same
    assert run(FrameSplitter(synced=False), [bytes([x]) for x in stream[cut:]]) == events


def test_incomplete_frame_at_the_end():
    a, b = api_versions_request(1), metadata_request(2, 5)
    events = run(FrameSplitter(), [a + b[:-7]])
    assert events[-1] == Incomplete(len(a), len(b) - 4, b[4:-7], len(b) - 7)
    assert run(FrameSplitter(), [a + b[:2]])[-1] == Incomplete(len(a), None, b"", 2)
    assert covered(run(FrameSplitter(), [a + b[:-7]])) == len(a + b) - 7


def test_response_resync_uses_the_awaited_correlation_ids():
    def resp(corr, n):
        return frame(response_header(corr, False) + i16(0) + i32(n) + b"\x00" * n)

    frames_ = [resp(10, 3), resp(11, 40), resp(12, 5), resp(13, 8)]
    stream = b"".join(frames_)
    start = len(frames_[0]) + 12  # inside frame 11 ...
    end = len(frames_[0]) + len(frames_[1]) + 9  # ... to inside frame 12
    for pending, found in (({13}, [10, 11, 13]), ({12, 13}, [10, 11, 13])):
        sp = FrameSplitter("response", correlation_ids=pending)
        events = run(sp, [stream[:start], stream[end:]], gaps={0: end - start})
        frames = [e for e in events if isinstance(e, Frame)]
        assert [f.payload[:4] for f in frames] == [i32(c) for c in found]
        assert frames[1].complete is False
        assert covered(events) == len(stream)
    # ids matter: after a gap, a frame-like run of bytes with an unknown id is passed over ...
    fake = i32(8) + i32(99) + i32(0)
    sp = FrameSplitter("response", correlation_ids={13})
    events = run(sp, [frames_[0], fake + frames_[3]], gaps={0: 5})
    assert events[2] == Skipped(len(frames_[0]) + 5, len(fake), "gap")
    assert events[3].payload[:4] == i32(13)
    # ... but a stream joined mid-connection starts with answers to requests never seen:
    # believed when a response with a known id follows right after them
    sp = FrameSplitter("response", correlation_ids={13}, synced=False)
    events = run(sp, [fake + frames_[3]])
    assert [e.payload[:4] for e in events] == [i32(99), i32(13)]


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=600), st.lists(st.tuples(st.integers(0, 600), st.integers(0, 50)),
                                          max_size=5),
       st.booleans(), st.sampled_from(["request", "response"]))
def test_random_bytes_and_gaps_are_always_accounted_for(data, gaps, synced, direction):
    sp = FrameSplitter(direction, synced=synced, max_size=1 << 20)
    events = []
    pos = 0
    total = 0
    for at, length in sorted(gaps):
        at = min(max(at, pos), len(data))
        events += sp.feed(data[pos:at])
        total += at - pos
        events += sp.gap(length)
        total += length
        pos = at
    events += sp.feed(data[pos:]) + sp.finish()
    total += len(data) - pos
    assert covered(events) == total
    assert sp.offset == total
