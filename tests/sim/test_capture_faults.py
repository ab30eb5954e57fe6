"""The capture faults' transforms (capture_faults.py) on a small crafted capture: what each keeps."""

from __future__ import annotations

from tests.sim import capture_faults as cf
from tests.sim import wire


def _capture(tmp_path):
    """Three connections: a client to node 1, a client to node 2, node 1's marker sender to node 2's
    inter-broker listener (9093); two messages each way on each."""
    cap = wire.Capture()
    for name, client, server, port in (("c1", wire.CLIENT_HOST, wire.node_ip(1), 9092),
                                       ("c2", wire.CLIENT_HOST, wire.node_ip(2), 9092),
                                       ("m12", wire.node_ip(1), wire.node_ip(2), 9093)):
        cap.exchange(name, [(0, b"req-" + name.encode()), (1, b"resp-" + name.encode())] * 2, 1000,
                     client_ip=client, server_ip=server, server_port=port)
    path = tmp_path / "c.pcap"
    cap.write(path, 2000)
    return path


def _segments(path):
    _, recs = cf.records(path.read_bytes())
    return [cf.segment(r) for r in recs]


def test_lossy_drops_only_the_chosen_payload_segments(tmp_path):
    path = _capture(tmp_path)
    before = _segments(path)
    payload = [s for s in before if s.payload]
    assert len(payload) == 12
    cf.apply(path, {"kind": "lossy", "drops": [0, 7]})
    after = _segments(path)
    assert len(after) == len(before) - 2      # handshakes, ACKs and FINs all kept
    assert [s for s in after if s.payload] == [s for i, s in enumerate(payload) if i not in (0, 7)]


def test_lossy_any_may_drop_a_handshake_segment(tmp_path):
    """`any` (KAUDIT_SIM_LOSS_ANY): the drops count every TCP segment, the first being a SYN."""
    path = _capture(tmp_path)
    before = _segments(path)
    cf.apply(path, {"kind": "lossy", "drops": [0], "any": True})
    assert _segments(path) == before[1:] and before[0].payload == 0


def test_lossy_rate_drops_at_least_one_and_is_seeded(tmp_path):
    path = _capture(tmp_path)
    _, recs = cf.records(path.read_bytes())
    one = cf.lossy_drops(recs, {"kind": "lossy", "rate": 0.01, "seed": 5})
    assert len(one) == 1      # ceil(1 % of 12)
    assert cf.lossy_drops(recs, {"kind": "lossy", "rate": 0.05, "seed": 5}) \
        == cf.lossy_drops(recs, {"kind": "lossy", "rate": 0.05, "seed": 5})


def test_one_broker_host_keeps_every_connection_of_the_broker(tmp_path):
    path = _capture(tmp_path)
    cf.apply(path, {"kind": "one_broker", "node": 1, "side": "host"})
    kept = {(s.src, s.dst) for s in _segments(path)}
    # node 1's client connection and its marker sender's (it is the client there)
    assert (wire.CLIENT_HOST, wire.node_ip(1)) in kept and (wire.node_ip(1), wire.node_ip(2)) in kept
    assert (wire.CLIENT_HOST, wire.node_ip(2)) not in kept


def test_one_broker_listener_keeps_only_connections_to_its_listeners(tmp_path):
    path = _capture(tmp_path)
    cf.apply(path, {"kind": "one_broker", "node": 1, "side": "listener"})
    kept = {(s.src, s.dst) for s in _segments(path)}
    assert kept == {(wire.CLIENT_HOST, wire.node_ip(1)), (wire.node_ip(1), wire.CLIENT_HOST)}
    path = _capture(tmp_path)
    cf.apply(path, {"kind": "one_broker", "node": 2, "side": "listener"})
    # node 2 serves the client and node 1's marker sender (on 9093)
    assert {(s.src, s.dst) for s in _segments(path)} >= {(wire.node_ip(1), wire.node_ip(2)),
                                                          (wire.CLIENT_HOST, wire.node_ip(2))}


def test_no_fault_leaves_the_capture_as_written(tmp_path):
    path = _capture(tmp_path)
    data = path.read_bytes()
    cf.apply(path, None)
    assert path.read_bytes() == data
