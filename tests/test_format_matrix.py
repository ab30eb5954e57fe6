"""Every format of every command on the bundled samples and the corpus's captures and log dirs
(one of each family; every one with KAUDIT_FULL_MATRIX=1): a report or an exit code with a
message, never a traceback.

Commands and formats run through the CLI (typer's runner, in-process). What they share is done
once per input: each engine entry point the commands call (the audit, the decode, the
transactions) is memoised by its inputs for this module, so the six formats of `kaudit pcap X`
cost one audit of X and six writers. The decode table's row limits are lowered: the view is the
same code on fewer rows."""

from __future__ import annotations

import copy
import os
import traceback
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import CORPUS, ROOT

FORMATS = ("parquet", "table", "json", "ndjson", "sarif", "html")   # parquet first: its audit is shared
CHUNK_ROWS = 64
# what each command writes; any other format is a usage error (exit 2) with a message
SUPPORTED = {
    "segments": set(FORMATS), "pcap": set(FORMATS), "audit": set(FORMATS) - {"parquet"},
    "txn": {"table", "json", "ndjson"}, "decode segments": {"table", "json", "ndjson", "parquet"},
    "decode pcap": {"table", "json", "ndjson", "parquet"},
}


# One of each corpus family (Kafka 3.0.2 and 4.1.0 clusters, their extra scenarios, librdkafka's
# mock, the public captures: pcap and pcapng, Kafka 4.x topic ids and transaction version 2,
# read_committed readers, hanging transactions, compaction); KAUDIT_FULL_MATRIX=1 takes every
# capture and log dir of the corpus (~70 s of CPU: the audits, decodes and transaction listings
# of ~60 captures and ~10 log dirs).
FULL = os.environ.get("KAUDIT_FULL_MATRIX") == "1"
SOME_CAPTURES = ("real-kafka-4.1.0/v2-txn-java-tv2/v2-txn-java-tv2.pcap",
                 "real-kafka-4.1.0/v5-fencing-tv2/v5-fencing-tv2.pcap",
                 "real-kafka-3.0.2/pcap/09-readcommitted-mixed.pcap",
                 "real-kafka-3.0.2/pcap/03-txn-aiokafka.pcapng",
                 "real-kafka-3.0.2-extra/02-hanging-unregistered-and-late-writes/"
                 "02-hanging-unregistered-and-late-writes.pcap",
                 "librdkafka-mock/pcap/mock-idem-txn-readcommitted.pcap",
                 "public/deepflow/mixed-with-unsupported.pcap", "public/nDPI/kafka.pcapng")
SOME_LOGDIRS = ("real-kafka-4.1.0/v7-compacted-eos-changelog/logdirs",
                "real-kafka-3.0.2-extra/02-hanging-unregistered-and-late-writes/logdirs")


def _captures() -> list[Path]:
    found = sorted(ROOT.glob("pcaps/*.pcap"))
    if CORPUS.is_dir():
        found += (sorted(p for p in CORPUS.rglob("*") if p.suffix in (".pcap", ".pcapng") and p.is_file())
                  if FULL else [CORPUS / p for p in SOME_CAPTURES])
    return found


def _logdirs(every: bool = FULL) -> list[Path]:
    found = [ROOT / "fixtures" / "logdirs" / "demo"]
    if CORPUS.is_dir():
        found += (sorted(p for p in CORPUS.rglob("logdirs*") if p.is_dir() and not p.name.endswith(".truth"))
                  if every else [CORPUS / p for p in SOME_LOGDIRS])
    return found


def _pairs() -> list[tuple[Path, Path]]:
    """(captures, log dirs) of one cluster: each scenario's capture beside its log dirs, and (in
    the full matrix) the 3.0.2 cluster's captures, a folder, with its final log dirs."""
    pairs = []
    for logs in _logdirs():
        caps = sorted(logs.parent.glob("*.pcap"))
        if len(caps) == 1:
            pairs.append((caps[0], logs))
        elif (logs.parent / "pcap").is_dir():
            pairs.append((logs.parent / "pcap", logs))
    return pairs


def _cut(chunks) -> list:
    """A decode's chunks, each cut to its first CHUNK_ROWS rows: every kind of row of every file
    still reaches every writer, without writing a big log dir's every index entry six times."""
    return [(kind, table.slice(0, CHUNK_ROWS)) for kind, table in chunks]


@pytest.fixture(scope="module")
def shared(monkeypatch_module):
    """The engine entry points, memoised by their inputs for this module."""
    import kaudit.cli as cli
    import kaudit.engine.decoding as decoding
    import kaudit.engine.joint as joint
    import kaudit.engine.local as local
    import kaudit.report.dump as dump

    memo: dict = {}

    def once(key, compute, restore):
        if key not in memo:
            memo[key] = compute()
        return restore(memo[key])

    real = {"run_audit": cli.run_audit, "audit_both": joint.audit_both, "decode_pcaps": decoding.decode_pcaps,
            "decode_segments": decoding.decode_segments, "list_transactions": local.list_transactions,
            "wire_transactions": local.wire_transactions}

    def run_audit(sp, parquet, command, *a):
        key = ("audit", command, tuple(a[3]))
        if parquet is not None:   # the --parquet run writes its tables (it runs first): its run is shared
            memo[key] = real["run_audit"](sp, parquet, command, *a)
        return once(key, lambda: real["run_audit"](sp, parquet, command, *a), copy.deepcopy)

    def audit_both(names, segments, *a, **k):
        return once(("joint", tuple(names), tuple(segments)), lambda: real["audit_both"](names, segments, *a, **k),
                    copy.deepcopy)

    def decode_pcaps(names, options, summaries, *a, **k):
        def compute():
            got: dict = {}
            errors, chunks = real["decode_pcaps"](names, options, got, *a, **k)
            return errors, _cut(chunks), got

        def restore(v):
            summaries.update(v[2])
            return list(v[0]), iter(v[1])
        return once(("decode pcap", tuple(names)), compute, restore)

    def decode_segments(paths, *a, **k):
        def compute():
            plan, chunks = real["decode_segments"](paths, *a, **k)
            return plan, _cut(chunks)
        return once(("decode segments", tuple(paths), k.get("deep")), compute, lambda v: (v[0], iter(v[1])))

    def list_transactions(names, *a, **k):
        return once(("txn", tuple(names)), lambda: real["list_transactions"](names, *a, **k), copy.deepcopy)

    def wire_transactions(captures, *a, **k):
        return once(("wire txn", tuple(captures)), lambda: real["wire_transactions"](captures, *a, **k),
                    copy.deepcopy)

    for mod, name, fn in ((cli, "run_audit", run_audit), (joint, "audit_both", audit_both),
                          (decoding, "decode_pcaps", decode_pcaps), (decoding, "decode_segments", decode_segments),
                          (local, "list_transactions", list_transactions),
                          (local, "wire_transactions", wire_transactions)):
        monkeypatch_module.setattr(mod, name, fn)
    monkeypatch_module.setattr(dump, "FRAME_ROW_LIMIT", 40)
    monkeypatch_module.setattr(dump, "TABLE_ROW_LIMIT", 20)
    return memo


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _args(command: str, inputs: list[str], fmt: str, out: Path) -> list[str]:
    if command == "audit":
        args = ["audit", "--pcap", inputs[0], "--segments", inputs[1]]
    else:
        args = [*command.split(), *inputs]
    if fmt == "parquet" and not command.startswith("decode"):
        return [*args, "--format", "json", "-o", str(out / "report.json"), "--parquet", str(out / "pq")]
    if fmt == "parquet":
        return [*args, "--format", "parquet", "-o", str(out / "pq")]
    if fmt in ("html", "sarif"):
        return [*args, "--format", fmt, "-o", str(out / f"report.{fmt}")]
    return [*args, "--format", fmt]


def _problems(command: str, inputs: list[str], tmp_path: Path) -> list[str]:
    from kaudit.cli import app

    runner = CliRunner()
    problems = []
    for fmt in FORMATS:
        out = tmp_path / fmt
        out.mkdir()
        args = _args(command, inputs, fmt, out)
        r = runner.invoke(app, args)
        crashed = r.exception is not None and not isinstance(r.exception, SystemExit)
        text = r.output
        if crashed or "Traceback" in text:
            tb = "".join(traceback.format_exception(r.exception)) if crashed else text
            problems.append(f"kaudit {' '.join(args)}: traceback\n{tb[-3000:]}")
        elif fmt not in SUPPORTED[command]:
            if r.exit_code != 2 or "error" not in text.lower() and "invalid" not in text.lower():
                problems.append(f"kaudit {' '.join(args)}: an unsupported format gave exit {r.exit_code}: {text[-500:]}")
        elif r.exit_code == 3:
            if "error" not in text:
                problems.append(f"kaudit {' '.join(args)}: exit 3 without a message")
        elif r.exit_code not in (0, 1):
            problems.append(f"kaudit {' '.join(args)}: exit {r.exit_code}: {text[-800:]}")
    return problems


@pytest.mark.parametrize("command", ["pcap", "decode pcap", "txn"])
def test_every_format_on_every_capture(shared, command, tmp_path):
    problems = []
    for n, capture in enumerate(_captures()):
        d = tmp_path / str(n)
        d.mkdir()
        problems += _problems(command, [str(capture)], d)
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize("command", ["segments", "decode segments", "txn"])
def test_every_format_on_every_logdir(shared, command, tmp_path):
    problems = []
    for n, logs in enumerate(_logdirs()):
        d = tmp_path / str(n)
        d.mkdir()
        problems += _problems(command, [str(logs)], d)
    assert not problems, "\n\n".join(problems)


def test_every_format_of_the_joint_audit(shared, tmp_path):
    pairs = _pairs()
    if not pairs:
        pytest.skip(f"corpus not found at {CORPUS}: no capture beside its log dirs")
    problems = []
    for n, (captures, logs) in enumerate(pairs):
        d = tmp_path / str(n)
        d.mkdir()
        problems += _problems("audit", [str(captures), str(logs)], d)
    assert not problems, "\n\n".join(problems)
