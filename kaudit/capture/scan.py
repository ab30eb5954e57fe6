"""Which TCP connections a capture file does not hold whole, from one pass over the headers.

When tcpdump rotates its output (`-C`, `-G`) a long-lived connection - every Kafka client's -
goes on from one file into the next. Decoded alone, each file shows half of it: the first file's
half never closes, the next one's starts mid-stream, and the frame cut at the rotation is lost.
The sources layer (pcap_stitch) hands the packets of such connections on, to be reassembled
across the files, and decodes the others as usual. This module tells them apart, before the
reassembly pass (which then diverts them: `CaptureStreams(divert=...)`).

A connection is whole when its first packet in the file is a SYN (without ACK) and, after its
last SYN, the file shows an RST, or a FIN from both sides and the ACK of the second one (else
that last ACK, in the next file, would look like a connection of its own there). The test looks
at flags only, and is
made per 4-tuple (every connection of a reused 4-tuple goes the same way). The reassembler
still decides the real boundaries; a misjudged connection costs nothing but speed: a whole one
handed on is reassembled alone by the stitcher (the same rows), an open-ended one kept here is
decoded as if the file were the only one (as without stitching).
"""

from __future__ import annotations

from kaudit.capture.link import ACK, CONTROL_FLAGS, FIN, RST, SYN, LinkDecoder, tcp_records
from kaudit.capture.pcap import open_capture

# a 4-tuple's state: [status, ISN of its last SYN, FIN directions seen (bits), direction of the
# last SYN or (closing) of the second FIN]
_CLOSED, _OPEN, _OPEN_ENDED, _CLOSING = 0, 1, 2, 3


def open_ended(buf) -> frozenset:
    """The 4-tuples (src, sport, dst, dport: both orientations, addresses as the link layer
    names them) of the TCP connections of the capture in `buf` that are not whole in it (open
    at its start or at its end). Raises DecodeError for input that is not a capture."""
    capture = open_capture(buf)
    mv = capture.buf
    link = LinkDecoder()
    decode = link.decode
    v4, v4_name = link._v4, link._v4_name
    by_name: dict = {}  # (src, sport, dst, dport) -> (state, direction)
    by_ints: dict = {}  # the fast path's (addresses, ports) ints -> the same
    for _frame, _ts, lt, start, end, origlen, tcp in tcp_records(capture):
        if tcp is not None:
            addrs, ports, seq, _ack, flags, _p, _e = tcp
            ent = by_ints.get((addrs, ports))
            if ent is None:
                src, dst = addrs >> 32, addrs & 0xFFFFFFFF
                name = (v4.get(src) or v4_name(src), ports >> 16, v4.get(dst) or v4_name(dst), ports & 0xFFFF)
                ent = by_name.get(name)
                if ent is None:
                    ent = _new(by_name, name, flags, seq)
                elif flags & CONTROL_FLAGS or ent[0][0] == _CLOSING:
                    _control(ent[0], ent[1], flags, seq)
                by_ints[(addrs, ports)] = ent
            elif flags & CONTROL_FLAGS or ent[0][0] == _CLOSING:
                _control(ent[0], ent[1], flags, seq)
            continue
        seg = decode(lt, mv[start:end], origlen)
        if seg is None:
            continue
        name = (seg.src, seg.sport, seg.dst, seg.dport)
        ent = by_name.get(name)
        if ent is None:
            _new(by_name, name, seg.flags, seg.seq)
        elif seg.flags & CONTROL_FLAGS or ent[0][0] == _CLOSING:
            _control(ent[0], ent[1], seg.flags, seg.seq)
    return frozenset(name for name, (state, _d) in by_name.items() if state[0] != _CLOSED)


def _new(by_name: dict, name: tuple, flags: int, seq: int) -> tuple:
    """The state of a 4-tuple first seen with this packet, under both orientations."""
    if flags & SYN and not flags & ACK:
        state = [_OPEN, seq, 0, 0]
    else:  # mid-stream (or a SYN-ACK whose SYN is in an earlier file)
        state = [_OPEN_ENDED, None, 0, 0]
    src, sport, dst, dport = name
    ent = by_name[name] = (state, 0)
    by_name[(dst, dport, src, sport)] = (state, 1)
    return ent


def _control(state: list, d: int, flags: int, seq: int) -> None:
    """A packet with SYN, FIN or RST, or any packet of a closing connection."""
    status = state[0]
    if status == _OPEN_ENDED:
        return
    if flags & SYN and not flags & ACK:
        if status == _OPEN and state[1] == seq and state[3] == d:
            return  # a retransmitted SYN
        state[0], state[1], state[2], state[3] = _OPEN, seq, 0, d  # a (new) connection
    elif flags & RST:
        state[0] = _CLOSED
    elif status == _CLOSING:
        if d != state[3] and flags & ACK:  # the peer of the second FIN acknowledges it
            state[0] = _CLOSED
    elif flags & FIN and status == _OPEN:
        state[2] |= 1 << d
        if state[2] == 3:
            state[0], state[3] = _CLOSING, d
