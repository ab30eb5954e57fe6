"""The simulator's capture: Kafka requests and responses, field by field from Kafka's JSON message
specs with the wire tests' primitives (independent of kaudit's decoders), on TCP connections
between the simulated hosts, written as one pcap in the order the simulated cluster sent them.

Packets are built with tests/capture/craft.py (plain bytes, no scapy: a capture of a few hundred
frames is written in milliseconds); each message is one TCP segment followed by the peer's ACK.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.audit.wire.wirecraft import add_partitions, end_txn, init_producer_id, produce, produce_response
from tests.audit.wire.wirecraft_txn import end_txn_v5, leader_add, markers
from tests.capture.craft import Flow, write_pcap
from tests.protocol.wire.wirebytes import (TAGS0, boolean, cstring, frame, i16, i32, i64, request_header,
                                           response_header)

MSS = 60000          # below the IPv4 total-length limit; the simulator's frames are far smaller
CLIENT_HOST = "10.0.1.1"
ADMIN_HOST = "10.0.1.9"


def node_ip(node: int) -> str:
    return f"10.0.0.{node + 1}"


@dataclass
class _Conn:
    flow: Flow
    opened: bool = False


@dataclass
class Capture:
    """Every message the simulated hosts exchanged, in order, with its time (ms)."""

    packets: list = field(default_factory=list)       # (ts seconds, frame bytes)
    conns: dict = field(default_factory=dict)
    next_port: int = 40000
    corr: dict = field(default_factory=dict)
    retransmit_every: int = 0     # every N-th data segment is sent twice (a TCP retransmission)
    _segments: int = 0
    # connection name -> True when the capture does not hold it (a capture point that misses that
    # traffic: `hidden_producers`)
    hidden: object = None

    def conn(self, name: str, client_ip: str, server_ip: str, server_port: int = 9092) -> _Conn:
        c = self.conns.get(name)
        if c is None:
            self.next_port += 1
            flow = Flow(c=(client_ip, self.next_port), s=(server_ip, server_port),
                        isn_c=1000 * len(self.conns) + 1, isn_s=900000 + len(self.conns))
            c = self.conns[name] = _Conn(flow)
        return c

    def next_corr(self, name: str) -> int:
        self.corr[name] = self.corr.get(name, 0) + 1
        return self.corr[name]

    def exchange(self, name: str, msgs, ts_ms: int, *, client_ip: str, server_ip: str,
                 server_port: int = 9092) -> None:
        """`msgs`: [(direction, frame bytes)] of one conversation on connection `name`."""
        if self.hidden is not None and self.hidden(name):
            return
        c = self.conn(name, client_ip, server_ip, server_port)
        t = ts_ms / 1000.0
        if not c.opened:
            for p in c.flow.handshake():
                self.packets.append((t, p))
            c.opened = True
        for d, data in msgs:
            for i in range(0, len(data), MSS):
                seq = c.flow.seq[d]
                self.packets.append((t, c.flow.send(d, data[i:i + MSS])))
                self._segments += 1
                if self.retransmit_every and self._segments % self.retransmit_every == 0:
                    self.packets.append((t, c.flow.at(d, seq, data[i:i + MSS])))
            self.packets.append((t, c.flow.ack(1 - d)))
            t += 0.0001

    def close(self, name: str, ts_ms: int) -> None:
        c = self.conns.pop(name, None)
        if c is not None and c.opened:
            t = ts_ms / 1000.0
            self.packets += [(t, c.flow.fin(0)), (t, c.flow.fin(1)), (t, c.flow.ack(0))]

    def write(self, path, ts_ms: int) -> None:
        for name in list(self.conns):
            self.close(name, ts_ms)
        # a stable sort: packets of one millisecond keep the order they were sent in
        pkts = sorted(self.packets, key=lambda p: p[0])
        with open(path, "wb") as f:
            f.write(write_pcap(pkts))


def hidden_producers(coordinator_node: int):
    """A capture without the producers' own traffic to the partition leaders nor the coordinator's
    markers (taken where the coordinator and the consumers talk, not the producers' links to the
    other brokers): their Produce requests to the leaders other than the coordinator's broker and
    every WriteTxnMarkers are not in it. A consumer then reads their markers without the offsets
    of the data below them (txn_parts.log_order)."""
    def hidden(name: str) -> bool:
        if "-txn-marker-sender->" in name:
            return True
        return "#" in name and "@" not in name and not name.endswith(f"->{coordinator_node}")
    return hidden


# ---- requests the existing helpers do not write ------------------------------------------------

def init_producer_id_v6(corr: int, pid: int, epoch: int, *, txn_id: str, enable_2pc: bool,
                        keep_prepared: bool = False, timeout_ms: int = 60000, error: int = 0,
                        client_id: str = "sim-producer", ongoing: tuple = (-1, -1)):
    """InitProducerId v6 (KIP-939): Enable2Pc, KeepPreparedTxn; the answer's OngoingTxnProducerId
    and OngoingTxnProducerEpoch are `ongoing`: the prepared transaction a KeepPreparedTxn
    recovery kept (its producer id and epoch), (-1, -1) when none."""
    req = (request_header(22, 6, corr, client_id, True) + cstring(txn_id) + i32(timeout_ms)
           + i64(-1) + i16(-1) + boolean(enable_2pc) + boolean(keep_prepared) + TAGS0)
    resp = (response_header(corr, True) + i32(0) + i16(error) + i64(pid) + i16(epoch)
            + i64(ongoing[0]) + i16(ongoing[1]) + TAGS0)
    return [(0, frame(req)), (1, frame(resp))]


def produce_exchange(corr: int, topic: str, partition: int, data: bytes, *, txn_id: str | None,
                     error: int | None, offset: int, acks: int = -1, client_id: str = "sim-producer"):
    """One single-batch Produce v3; error None: the response never came."""
    out = [(0, produce(corr, [(topic, partition, data)], acks=acks, txn_id=txn_id, client_id=client_id))]
    if error is not None:
        out.append((1, produce_response(corr, [(topic, partition, error, offset if error == 0 else -1)])))
    return out


__all__ = ["Capture", "node_ip", "CLIENT_HOST", "init_producer_id", "init_producer_id_v6", "add_partitions",
           "end_txn", "end_txn_v5", "leader_add", "markers", "produce_exchange", "produce_response"]
