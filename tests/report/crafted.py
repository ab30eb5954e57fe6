"""Crafted log dirs whose HTML reports the browser test opens: a torn transaction (an admin's
ABORT on one partition beside the coordinator's COMMIT on the other) and a duplicate (a
producer's batch stored twice after the broker lost its state), on three replicas."""

from __future__ import annotations

from pathlib import Path

from fixtures.builder import LogDirBuilder
from fixtures.builder.replicas import write_replicas

T0 = 1_767_225_600_000   # 2026-01-01T00:00:00Z


def torn_transaction(root: Path) -> Path:
    """Producer 7 (transactional id "tx") writes a-0 and b-0; an admin aborts a-0; the coordinator
    commits: a-0 ends ABORT (admin), b-0 COMMIT (coordinator)."""
    ld = LogDirBuilder(Path(root) / "torn", node_id=1, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    p = ld.producer(7, 0, transactional_id="tx", txn_state=ts, transaction_version=1)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p.send([b"1"], partition=a)
    p.send([b"2", b"3"], partition=b)
    p.send([b"4"], partition=a)
    a.append_control(7, p.producer_epoch, "ABORT", 0)       # the admin's marker
    p.commit()
    return ld.write()


def duplicate(root: Path) -> list[Path]:
    """orders-0 on nodes 1-3: producer 7 stores seq 0-4, 5-9, then seq 0-4 again (offsets 10-14,
    the same bytes and timestamp), then 10-14 at offsets 15-19."""
    def build(ld, node):
        pb = ld.partition("orders", 0, role="leader" if node == 1 else "follower")
        p = pb.producer(7, 0)
        p.send([b"a", b"b", b"c", b"d", b"e"], timestamp=T0)
        p.send([b"f", b"g", b"h", b"i", b"j"], timestamp=T0 + 10)
        p.send([b"a", b"b", b"c", b"d", b"e"], base_sequence=0, timestamp=T0)
        p.send([b"k", b"l", b"m", b"n", b"o"], base_sequence=10, timestamp=T0 + 30)
    return write_replicas(Path(root) / "cluster", build, nodes=(1, 2, 3), start_time_ms=T0)


def consumer_redelivery(root: Path) -> Path:
    """A capture of a cooperative rebalance: member A held orders-0 and orders-1 (served 0-9 of
    each, committed 5 of each); orders-1 moved to member B, which was served 5-11 (5-9 again)."""
    from tests.audit.consumers.test_consumer_rebalance import _cooperative
    from tests.sources.pcap.craft import write_capture

    path = root / "consumer-redelivery.pcap"
    write_capture(path, _cooperative(5))
    return path
