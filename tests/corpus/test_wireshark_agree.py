"""Wireshark's Kafka dissector (tshark from Debian's packages: one `tshark -T pdml` run per
capture, its XML read with lxml) as an independent decoder of every corpus capture, against
kaudit's rows on both paths (compiled and pure).

Where Wireshark decodes a PDU it must agree with kaudit: every request's (frame, api key,
version, correlation id), and the producer id, epoch, base sequence, codec and flags of every
record batch of the Produce requests and Fetch responses it walks. What it cannot decode - it
marks the PDU `[Unsupported API version]` or `[Malformed]`, as Wireshark 4.0 does for Produce
v9+, Fetch v12+ and newer flexible versions - is recorded (printed with -s, returned in the
summary) and not held against either side. tshark is installed by `make setup`
(.ci/install-tshark); without it the test skips and says so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from kaudit import native
from kaudit.engine.local import decode_pcaps
from kaudit.sources.pcap import PcapOptions

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
CODECS = {"0": "none", "1": "gzip", "2": "snappy", "3": "lz4", "4": "zstd"}


def _captures():
    return sorted(p for p in CORPUS.rglob("*") if p.suffix in (".pcap", ".pcapng"))


def _kaudit(path: Path) -> tuple[pa.Table, pa.Table, set]:
    options = PcapOptions(kafka_ports=frozenset({9092}), jobs=1)
    by_kind: dict = {}
    for kind, t in decode_pcaps([str(path)], options, {})[1]:
        by_kind.setdefault(kind, []).append(t)
    tables = {k: pa.concat_tables(v) for k, v in by_kind.items()}
    conns = tables.get("connection")
    ports = set()
    if conns is not None:
        for c in conns.filter(pa.compute.equal(conns["protocol"], "kafka")).to_pylist():
            ports.add(int(c["server"].rsplit(":", 1)[1]))
    return tables.get("frame"), tables.get("batch"), ports


# A field's name as pyshark (which this test drove before) names it: the layer's prefix out,
# '.' and '-' to '_' - so `kafka.unsupported_api_version` is `unsupported_api_version`.
def _field_name(name: str) -> str:
    return name.replace("kafka.", "").replace(".", "_").replace("-", "_").lower()


# characters XML 1.0 forbids, dropped before parsing (the ones pyshark drops)
_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(pdml: bytes) -> bytes:
    return _BAD_XML.sub("", pdml.decode(errors="ignore")).encode()


def _kafka_layers(path: Path, ports: set):
    """(frame number, {field name: [shown values]}) for every Kafka PDU Wireshark dissects, read
    from one `tshark -T pdml` run over the whole capture, parsed as it streams: each top-level
    `kafka` proto of a packet, every field under it (nested ones too), named and shown as
    pyshark's XmlLayer names them - the first raw name that maps to a name wins, values in
    document order: the same views pyshark gave (checked on the whole corpus), without its
    packet-by-packet parsing (~2 minutes over the corpus, against seconds)."""
    from lxml import etree

    # -J kafka: only the Kafka protos are written out (whole, expert infos included), ~6x less PDML
    args = ["tshark", "-n", "-r", str(path), "-Y", "kafka", "-T", "pdml", "-J", "kafka"]
    for p in sorted(ports):
        args += ["-d", f"tcp.port=={p},kafka"]
    parser = etree.XMLPullParser(events=("end",), tag="packet", huge_tree=True, recover=True)
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as tshark:
        rest = b""
        for chunk in iter(lambda: tshark.stdout.read1(1 << 20), b""):
            # whole lines only: PDML is line-oriented, so no character is split between chunks
            lines, _, rest = (rest + chunk).rpartition(b"\n")
            parser.feed(_clean(lines + b"\n"))
            for _, packet in parser.read_events():
                yield from _packet_layers(packet)
                packet.clear()
        parser.feed(_clean(rest))
    parser.close()
    for _, packet in parser.read_events():
        yield from _packet_layers(packet)
    assert tshark.returncode == 0, (path, tshark.returncode)


def _packet_layers(packet):
    protos = packet.findall("proto")
    frame = int(protos[0].find("field[@name='num']").get("show"))
    for proto in protos:
        if proto.get("name", "").lower() != "kafka":
            continue
        raw: dict = {}
        for f in proto.iterfind(".//field"):
            raw.setdefault(f.get("name"), []).append(f.get("show"))
        fields: dict = {}
        for name, shown in raw.items():
            fields.setdefault(_field_name(name), shown)
        yield frame, fields


def _wireshark(path: Path, ports: set):
    """(requests {(frame, key, version, correlation id)}, batches {(frame, is_response):
    Counter of batch facts}, undecoded [(frame, why)])."""
    requests, batches, undecoded = set(), {}, []
    for frame, k in _kafka_layers(path, ports):
        names = set(k)
        key, version = k.get("api_key", []), k.get("api_version", [])
        if not key or not version:
            continue
        response = "request_frame" in names
        bad = {"unsupported_api_version", "_ws_malformed", "bad_string_length",
               "truncated_content"} & names
        if not response:
            requests.add((frame, int(key[0]), int(version[0]), int(k["correlation_id"][0])))
        if bad:
            undecoded.append((path.name, frame, int(key[0]), int(version[0]), sorted(bad)))
            continue
        pids = k.get("producer_id", [])
        if int(key[0]) in (0, 1) and pids:
            facts = zip(pids, k.get("producer_epoch", []), k.get("batch_base_sequence", []),
                        k.get("batch_codec", []), k.get("batch_transactional", []),
                        k.get("batch_control_batch", []))
            batches.setdefault((frame, response), Counter()).update(
                (int(p), int(e), int(s), CODECS.get(c, c), t == "1", b == "1")
                for p, e, s, c, t, b in facts)
    return requests, batches, undecoded


def _ours(frames: pa.Table | None, batches: pa.Table | None):
    requests = set()
    if frames is not None:
        for f in frames.select(["request_frame", "api_key", "api_version", "correlation_id"]).to_pylist():
            if f["request_frame"] is not None:
                requests.add((f["request_frame"], f["api_key"], f["api_version"], f["correlation_id"]))
    facts: dict = {}
    if batches is not None:
        for b in batches.filter(pa.compute.equal(batches["magic"], 2)).to_pylist():
            where = (b["position"], b["source_kind"] == "fetch")
            facts.setdefault(where, Counter())[(b["producer_id"], b["producer_epoch"], b["base_sequence"],
                                                 b["codec"], b["is_transactional"], b["is_control"])] += 1
    return requests, facts


@pytest.fixture(scope="module")
def wireshark(corpus):
    """Wireshark's view of every corpus capture (run once for both paths): path -> (ports,
    requests, batches, undecoded)."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (make setup installs Debian's tshark as root; see .ci/install-tshark)")
    pytest.importorskip("lxml")
    views = {}
    for path in _captures():
        _, _, ports = _kaudit(path)
        if ports:
            views[path] = (ports, *_wireshark(path, ports))
    return views


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure"])
def test_wireshark_agrees_where_it_decodes(wireshark, pure):
    if not pure and native.module("kaudit.protocol._cbatch") is None:
        pytest.skip("the compiled core is not built")
    checked = Counter()
    undecoded_all = []
    with native.pure(pure):
        for path, (ports, ws_requests, ws_batches, undecoded) in wireshark.items():
            frames, batch_rows, _ = _kaudit(path)
            our_requests, our_batches = _ours(frames, batch_rows)
            undecoded_all += undecoded
            skipped = {(f, k, v) for _, f, k, v, _ in undecoded}
            # every request Wireshark sees, kaudit decodes with the same key, version, correlation id
            missing = {r for r in ws_requests - our_requests if r[:3] not in skipped}
            assert not missing, (path.name, sorted(missing)[:5])
            checked["requests"] += len(ws_requests)
            for where, facts in ws_batches.items():
                assert our_batches.get(where) == facts, (path.name, where, facts, our_batches.get(where))
                checked["batches"] += sum(facts.values())
    print(f"\nWireshark agreed on {checked['requests']} requests and {checked['batches']} record batches; "
          f"{len(undecoded_all)} PDUs it does not decode (recorded, not compared), by (api key, version): "
          f"{sorted(Counter((k, v) for _, _, k, v, _ in undecoded_all).items())}")
    assert checked["requests"] > 1000 and checked["batches"] > 0
