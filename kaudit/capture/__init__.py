"""Capture layer (stdlib only): pcap/pcapng reading, link/IP/TCP decoding, TCP reassembly.

    from kaudit.capture import CaptureStreams
    cs = CaptureStreams(mmap_or_bytes)   # DecodeError if it is not a pcap/pcapng file
    for ev in cs.events(): ...           # ConnOpen, StreamData, StreamGap, StreamConflict, ConnClose
                                         # (Diverted: the raw segments of CaptureStreams(divert=...))
    cs.issues                            # CaptureIssue list (cut or corrupt file), after the loop

The layers one by one: `iter_packets`/`open_capture` (pcap.py) -> `LinkDecoder.decode` (link.py)
-> `Reassembler.feed`/`flush` (tcp.py); CaptureStreams fuses them for speed. `open_ended` (scan.py)
names the connections a file does not hold whole (rotated captures). TLS with key logs:
kaudit/capture/tls (docs/tls.md).
"""

from kaudit.capture.events import (
    ConnClose, ConnOpen, ConnStats, Diverted, StreamConflict, StreamData, StreamGap,
)
from kaudit.capture.link import (
    ACK, FIN, PSH, RST, SYN, URG, SUPPORTED_LINKTYPES, LinkDecoder, TcpSegment, decode_tcp,
)
from kaudit.capture.pcap import (
    Capture, CaptureIssue, Interface, RawPacket, iter_packets, open_capture,
)
from kaudit.capture.scan import open_ended
from kaudit.capture.streams import CaptureStreams
from kaudit.capture.tcp import Reassembler

__all__ = [
    "ACK", "FIN", "PSH", "RST", "SYN", "URG", "SUPPORTED_LINKTYPES", "LinkDecoder", "TcpSegment",
    "decode_tcp", "Capture", "CaptureIssue", "Interface", "RawPacket", "iter_packets",
    "open_capture", "open_ended", "CaptureStreams", "ConnClose", "ConnOpen", "ConnStats",
    "Diverted", "Reassembler",
    "StreamConflict", "StreamData", "StreamGap",
]
