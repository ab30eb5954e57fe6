"""Rotated capture files decoded as the one capture they are (sources.pcap_stitch).

A capture is cut into files record by record (as tcpdump -C/-G does); decoding the files
together must give the rows of the uncut capture, with the positions of the stitching rule: a
connection's rows name the file of its first packet, and frame numbers count on from it across
the files (so, mapped to the uncut capture's numbering, they are equal). Stage 1 + stage 2 (the
Spark engine's path) must give exactly the rows of the in-process composition, however the
fragments are chunked."""

from __future__ import annotations

import json
import random
import struct

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from kaudit.capture import open_ended
from kaudit.cli import app
from kaudit.sources import pcap, pcap_parallel
from kaudit.sources.pcap import PcapOptions, PcapSummary, decode_capture
from kaudit.sources.pcap_stitch import (
    FRAGMENT, SORT_KEYS, STITCHED_CONN_ID, decode_captures, file_order, split_capture,
    stitch_fragments,
)
from tests.audit.wire.wirecraft import batch, metadata, send
from tests.sources.pcap.craft import Conn, write_capture

P = 7001
FRAMES = ("position", "request_frame", "response_frame", "first_frame", "last_frame")
CORPUS_PORTS = frozenset({9092, 9093, 9094})
CORPUS_SAMPLES = ("05-fence-java.pcap", "09-readcommitted-mixed.pcap", "02-retry-idem-java.pcap",
                  "03-txn-confluent.pcap")


# ---- helpers -----------------------------------------------------------------------------------

def split_pcap(src, cuts, out_dir, stem="part"):
    """Cut a classic pcap file into files at record indices `cuts` (bytes copied as they are)."""
    data = src.read_bytes()
    order = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    records, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack_from(order + "I", data, off + 8)[0]
        records.append(data[off:off + 16 + incl])
        off += 16 + incl
    bounds = [0, *cuts, len(records)]
    paths = []
    for i in range(len(bounds) - 1):
        p = out_dir / f"{stem}{i}.pcap"
        p.write_bytes(data[:24] + b"".join(records[bounds[i]:bounds[i + 1]]))
        paths.append(p)
    return paths, bounds


def rows_of(chunks) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for kind, table in chunks:
        out.setdefault(kind, []).extend(table.to_pylist())
    return out


def as_one_capture(rows, offsets=None, *, open_end=False):
    """Rows comparable across the cut: frame numbers in the uncut capture's numbering (a row's
    source file starts at offsets[source]), without source and conn_id; open_end: the close of
    connections still open at the end is left out (a connection silent in the last file ends
    with the last file holding its packets)."""
    out = []
    for r in rows:
        r = dict(r)
        base = (offsets or {}).get(r.pop("source", None), 0)
        r.pop("conn_id", None)
        for f in FRAMES:
            if r.get(f) is not None:
                r[f] += base
        if open_end and r.get("close_reason") == "end":
            r["last_frame"] = r["last_ts"] = None
        out.append(repr(sorted(r.items())))
    return sorted(out)


def exact(rows):
    return {kind: sorted(repr(sorted(r.items())) for r in rs) for kind, rs in rows.items()}


def producer_messages(n=6):
    """A producer's conversation: Metadata, then `n` Produce exchanges of 5-record batches."""
    m = metadata(1)
    for i in range(n):
        m += send(2 + i, batch(P, 0, 5 * i, 5), offset=5 * i)
    return m


PRODUCE_CORR4 = 6  # message index of the Produce request with correlation id 4


def cut_inside(pkts, message):
    """The record index of a data packet in the middle of `message` (not its first bytes)."""
    idx = [i for i, (p, _) in enumerate(pkts) if p.kind == "data" and message in p.seg.messages]
    assert len(idx) >= 3, "the message must span several segments"
    return idx[len(idx) // 2]


@pytest.fixture
def rotated(tmp_path):
    """(whole capture, [file 1, file 2], bounds): one producer connection, cut inside a Produce
    request."""
    whole = tmp_path / "whole.pcap"
    pkts = write_capture(whole, Conn(producer_messages()), segment=64)
    files, bounds = split_pcap(whole, [cut_inside(pkts, PRODUCE_CORR4)], tmp_path)
    return whole, files, bounds


# ---- stitching across the cut ------------------------------------------------------------------

def test_cut_inside_a_produce_request_decodes_whole(rotated):
    whole, (f1, f2), bounds = rotated
    base = rows_of(decode_capture(str(whole)))
    summaries: dict = {}
    got = rows_of(decode_captures([str(f2), str(f1)], summaries=summaries))  # not in time order
    assert "decode_issue" not in got, got.get("decode_issue")
    offsets = {str(f1): 0, str(f2): bounds[1]}
    for kind in ("frame", "batch", "connection"):
        assert as_one_capture(got[kind], offsets) == as_one_capture(base[kind]), kind
    # the rule: one connection, its rows name the file of its first packet, frames count on
    produce = next(r for r in got["frame"] if r["correlation_id"] == 4)
    assert produce["complete"] and produce["decode_error"] is None
    assert produce["source"] == str(f1) and produce["request_frame"] > bounds[1]
    assert {r["source"] for kind in got for r in got[kind]} == {str(f1)}
    (conn,) = got["connection"]
    assert conn["conn_id"] == STITCHED_CONN_ID + conn["first_frame"]
    assert (conn["close_reason"], conn["gaps"], conn["requests"], conn["responses"]) == ("fin", 0, 7, 7)
    # the connection is counted once, in its first file
    assert (summaries[str(f1)].connections, summaries[str(f2)].connections) == (1, 0)
    assert summaries[str(f1)].kafka_connections == 1
    # without stitching, the cut request is lost
    apart = rows_of(c for f in (f1, f2) for c in decode_capture(str(f)))
    assert {r["issue"] for r in apart["decode_issue"]} & {"incomplete-frame", "skipped-bytes", "stream-gap"}
    assert len(apart["batch"]) < len(base["batch"])


def test_every_cut_point_gives_the_rows_of_the_uncut_capture(tmp_path):
    whole = tmp_path / "whole.pcap"
    conns = [Conn(producer_messages(3), client=("10.0.0.1", 40001)),
             Conn(producer_messages(3), client=("10.0.0.3", 40003), fin=False)]
    pkts = write_capture(whole, conns, segment=50, interleave=True)
    base = {k: as_one_capture(v, open_end=True) for k, v in rows_of(decode_capture(str(whole))).items()}
    for cut in range(1, len(pkts)):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        files, bounds = split_pcap(whole, [cut], d)
        got = rows_of(decode_captures([str(f) for f in files]))
        offsets = {str(f): b for f, b in zip(files, bounds)}
        assert {k: as_one_capture(v, offsets, open_end=True) for k, v in got.items()} == base, cut


def test_a_segment_lost_at_the_cut_stays_a_gap(tmp_path):
    lost = lambda s: s.messages == (PRODUCE_CORR4,) and s.index == 1  # noqa: E731
    whole = tmp_path / "whole.pcap"
    pkts = write_capture(whole, Conn(producer_messages()), segment=64, drop=lost)
    cut = next(i for i, (p, _) in enumerate(pkts) if p.kind == "data" and p.seg.messages == (PRODUCE_CORR4,)
               and p.seg.index == 2)  # file 2 starts just after the hole
    (f1, f2), bounds = split_pcap(whole, [cut], tmp_path)
    got = rows_of(decode_captures([str(f1), str(f2)]))
    gaps = [r for r in got["decode_issue"] if r["issue"] == "stream-gap"]
    assert [(g["length"], g["source"]) for g in gaps] == [(64, str(f1))]
    (conn,) = got["connection"]
    assert (conn["gaps"], conn["gap_bytes"]) == (1, 64)
    assert not any(r["correlation_id"] == 4 and r["complete"] for r in got["frame"])
    assert {r["correlation_id"] for r in got["frame"] if r["complete"]} >= {1, 2, 3, 5, 6, 7}
    # the very rows of the uncut capture with the same hole
    base = rows_of(decode_capture(str(whole)))
    offsets = {str(f1): 0, str(f2): bounds[1]}
    for kind in base:
        assert as_one_capture(got[kind], offsets) == as_one_capture(base[kind]), kind


def test_a_new_syn_after_the_cut_is_a_new_connection(tmp_path):
    """Port reuse: the connection spanning the cut, then another one on the same ports that
    lies wholly in the second file (its rows name that file, with its own frame numbers)."""
    whole = tmp_path / "whole.pcap"
    first = Conn(producer_messages(4))
    second = Conn(metadata(9) + send(10, batch(P, 1, 0, 2), offset=30), isn=(90000, 700000))
    pkts = write_capture(whole, [first, second], segment=64)
    (f1, f2), bounds = split_pcap(whole, [cut_inside(pkts, PRODUCE_CORR4)], tmp_path)
    got = rows_of(decode_captures([str(f1), str(f2)]))
    base = rows_of(decode_capture(str(whole)))
    offsets = {str(f1): 0, str(f2): bounds[1]}
    for kind in base:
        assert as_one_capture(got[kind], offsets) == as_one_capture(base[kind]), kind
    a, b = sorted(got["connection"], key=lambda r: r["first_ts"])
    assert (a["source"], a["close_reason"], b["source"], b["syn_seen"]) == (str(f1), "fin", str(f2), True)
    assert b["first_frame"] == base["connection"][1]["first_frame"] - bounds[1]
    assert {r["source"] for r in got["frame"] if r["correlation_id"] >= 9} == {str(f2)}


def test_corpus_capture_split_at_its_middle_packet(corpus, tmp_path):
    samples = [corpus / "real-kafka-3.0.2" / "pcap" / name for name in CORPUS_SAMPLES]
    samples = [p for p in samples if p.is_file()]
    if not samples:
        pytest.skip(f"none of {CORPUS_SAMPLES} in {corpus}/real-kafka-3.0.2/pcap")
    options = PcapOptions(kafka_ports=CORPUS_PORTS)
    for path in samples:
        d = tmp_path / path.stem
        d.mkdir()
        middle = split_pcap(path, [], d, "all")[1][-1] // 2  # the record count, halved
        files, bounds = split_pcap(path, [middle], d)
        base = rows_of(decode_capture(str(path), options))
        got = rows_of(decode_captures([str(f) for f in files], options))
        offsets = {str(f): b for f, b in zip(files, bounds)}
        assert set(got) == set(base), path.name
        for kind in ("frame", "batch"):
            assert as_one_capture(got[kind], offsets) == as_one_capture(base[kind]), (path.name, kind)
        for kind in base:
            assert as_one_capture(got[kind], offsets, open_end=True) == as_one_capture(base[kind], open_end=True), \
                (path.name, kind)
        spanning = [c for c in got["connection"] if c["source"] == str(files[0])
                    and (c["last_frame"] or 0) > middle]
        assert spanning, f"{path.name}: no connection crosses the cut"


# ---- stage 1 + stage 2 (the Spark engine's path) -----------------------------------------------

def _stages(files, options):
    """Stage 1 on each file (file_index by file_order); its rows and all fragments, sorted."""
    rows, fragments = [], []
    for i, p in enumerate(file_order([str(f) for f in files])):
        for kind, t in split_capture(p, i, options, PcapSummary()):
            (fragments if kind == FRAGMENT else rows).append((kind, t))
    table = pa.concat_tables([t for _, t in fragments]).sort_by([(c, "ascending") for c in SORT_KEYS])
    return rows, table


def _rechunk(table, how, rng):
    if how == "one row":
        return [table.slice(i, 1) for i in range(table.num_rows)]
    if how == "batches":
        return table.to_batches(max_chunksize=7)
    chunks, i = [], 0
    while i < table.num_rows:
        k = rng.choice((1, 2, 3, rng.randint(1, 40), rng.randint(1, 400)))
        chunks.append(table.slice(i, k))
        i += k
    return chunks


def test_stage_two_gives_the_same_rows_however_the_fragments_are_chunked(tmp_path):
    whole = tmp_path / "whole.pcap"
    conns = [Conn(producer_messages(5), client=("10.0.0.%d" % (i + 1), 40000 + i), fin=i != 1)
             for i in range(3)]
    n = len(write_capture(whole, conns, segment=40, interleave=True))
    files, _ = split_pcap(whole, [n // 3, n // 2, 2 * n // 3], tmp_path)
    options = PcapOptions()
    want = exact(rows_of(decode_captures([str(f) for f in files], options)))
    stage1, fragments = _stages(files, options)
    assert len(set(fragments.column("key").to_pylist())) == 3
    rng = random.Random(5)
    for how in ("one row", "random", "random", "batches"):
        got = exact(rows_of(stage1 + list(stitch_fragments(_rechunk(fragments, how, rng), options))))
        assert got == want, how


def test_stage_two_refuses_fragments_out_of_order(rotated):
    _, files, _ = rotated
    _, fragments = _stages(files, PcapOptions())
    order = list(range(fragments.num_rows))
    random.Random(3).shuffle(order)
    with pytest.raises(ValueError, match="sort them by"):
        list(stitch_fragments([fragments.take(pa.array(order))]))


def test_stage_one_in_worker_processes_gives_the_same_chunks(rotated, monkeypatch):
    monkeypatch.setattr(pcap, "FLUSH_ROWS", 5)
    monkeypatch.setattr(pcap_parallel, "FLUSH_ROWS", 5)
    _, (f1, _), _ = rotated

    def run(jobs):
        summary = PcapSummary()
        chunks = [(k, t.to_pylist()) for k, t in split_capture(str(f1), 0, PcapOptions(jobs=jobs), summary)]
        return chunks, vars(summary)

    one = run(1)
    assert any(kind == FRAGMENT for kind, _ in one[0])
    assert run(2) == one


# ---- the single-file path, file order, the scan, the CLI ---------------------------------------

def test_one_file_is_decoded_as_before(rotated):
    whole, _, _ = rotated
    summaries: dict = {}
    got = [(k, t.to_pylist()) for k, t in decode_captures([str(whole)], summaries=summaries)]
    summary = PcapSummary()
    assert got == [(k, t.to_pylist()) for k, t in decode_capture(str(whole), summary=summary)]
    assert vars(summaries[str(whole)]) == vars(summary)


def test_files_are_ranked_by_their_first_packet(rotated):
    _, (f1, f2), _ = rotated
    assert file_order([str(f2), str(f1)]) == [str(f1), str(f2)]
    summaries: dict = {}
    a = exact(rows_of(decode_captures([str(f2), str(f1)], summaries=summaries)))
    assert list(summaries) == [str(f2), str(f1)]  # the inputs' order, for the report
    assert a == exact(rows_of(decode_captures([str(f1), str(f2)])))


def test_unreadable_files_are_reported_and_the_others_decoded(rotated, tmp_path):
    _, (f1, f2), _ = rotated
    garbage = tmp_path / "garbage.pcap"
    garbage.write_bytes(b"not a capture" * 10)
    errors: list = []
    got = rows_of(decode_captures([str(f1), str(garbage), str(f2)], errors=errors))
    assert len(errors) == 1 and errors[0].startswith(str(garbage))
    assert "decode_issue" not in got and len(got["frame"]) == 7
    with pytest.raises(Exception, match="not a pcap"):
        list(decode_captures([str(f1), str(garbage)]))


def test_open_ended_names_the_connections_a_file_does_not_hold_whole(tmp_path):
    conn = Conn(producer_messages(1))
    whole = tmp_path / "whole.pcap"
    pkts = write_capture(whole, conn)
    assert open_ended(whole.read_bytes()) == frozenset()
    four = ({("10.0.0.1", 40001, "10.0.0.2", 9092), ("10.0.0.2", 9092, "10.0.0.1", 40001)})
    # cut before the last ACK: the FINs are in the first file, the ACK of the second in the next
    (a, b), _ = split_pcap(whole, [len(pkts) - 1], tmp_path)
    assert open_ended(a.read_bytes()) == four and open_ended(b.read_bytes()) == four
    late = tmp_path / "late.pcap"
    write_capture(late, conn, start=lambda p: p.kind == "data")
    assert open_ended(late.read_bytes()) == four


def test_cli_decodes_and_audits_rotated_files_as_one_capture(rotated):
    _, (f1, f2), _ = rotated
    runner = CliRunner()
    r = runner.invoke(app, ["decode", "pcap", str(f2), str(f1), "--format", "ndjson"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert not [x for x in rows if x["kind"] == "decode_issue"]
    frames = [x for x in rows if x["kind"] == "frame"]
    assert len(frames) == 7 and all(f["complete"] for f in frames)
    r = runner.invoke(app, ["pcap", str(f1), str(f2), "--format", "json"])
    rep = json.loads(r.stdout)
    assert not {f["rule"] for f in rep["findings"]} & {"stream-gap", "undecodable-frame", "unanswered-request"}
    assert rep["coverage"]["batches"] == 6


def test_same_endpoints_in_unrelated_captures_are_not_stitched(tmp_path):
    """Two captures, each in the middle of a connection on the same endpoints, but not one
    connection (another initial sequence number: a port reused, or captures that are not one
    rotated capture): each half is decoded on its own, no stream gap joins them."""
    parts = []
    for i, (isn, t0) in enumerate((((1000, 500000), "1700000000"), ((3_000_000_000, 4_000_000_000), "1700000100"))):
        whole = tmp_path / f"whole{i}.pcap"
        pkts = write_capture(whole, Conn(producer_messages(4), isn=isn), segment=64, t0=t0)
        d = tmp_path / f"d{i}"
        d.mkdir()
        files, _ = split_pcap(whole, [3, len(pkts) - 3], d)   # without the handshake and the FINs
        parts.append(files[1])
    got = rows_of(decode_captures([str(p) for p in parts]))
    alone = [rows_of(decode_capture(str(p))) for p in parts]
    issues = [r["issue"] for r in got.get("decode_issue", [])]
    assert "stream-gap" not in issues
    assert issues.count("stream-gap") == sum(r["issue"] == "stream-gap" for a in alone for r in a.get("decode_issue", []))
    assert len(got["frame"]) == sum(len(a["frame"]) for a in alone)
    assert len(got["connection"]) == 2
