"""What the command modules share: exit codes, messages, the options every command takes (the
selection: --topic, --partition, --producer-id, --transactional-id, --since, --until), and the
checks that refuse a green result from the wrong input (exit 3 with what was expected)."""

from __future__ import annotations

import gc
import inspect
import re
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_UNREADABLE = 0, 1, 2, 3
MAX_FRAME_BYTES, MAX_BATCH_BYTES = 100 * 1024 * 1024, 64 * 1024 * 1024


class Severity(str, Enum):
    info = "info"
    warning = "warning"
    error = "error"
    critical = "critical"


PathsArg = Annotated[list[Path], typer.Argument(help="Log dirs, folders of log dirs, partition dirs or files.")]
CapturesArg = Annotated[list[Path], typer.Argument(
    help="pcap or pcapng capture files, or folders holding them (rotated files form one timeline).")]
KafkaPortOpt = Annotated[Optional[list[int]], typer.Option(
    "--kafka-port", help="Broker port (repeatable; default 9092). Kafka on other ports is "
    "found from its request headers.")]
TlsKeylogOpt = Annotated[Optional[list[Path]], typer.Option(
    "--tls-keylog", help="TLS key log (NSS format, as SSLKEYLOGFILE writes it) holding the secrets of "
    "the captured connections (repeatable): Kafka over TLS is decrypted with it and audited as "
    "plaintext. A pcapng's Decryption Secrets Blocks are used without it. Keys are never printed.")]
MaxFrameOpt = Annotated[int, typer.Option("--max-frame-bytes", min=1024, help="Largest Kafka frame accepted.")]
MaxBatchOpt = Annotated[int, typer.Option("--max-batch-bytes", min=1024,
                                          help="Largest batch (and decompressed payload) accepted.")]
JobsOpt = Annotated[Optional[int], typer.Option(
    "--jobs", "-j", min=1, help="Processes of the local engine. Default: one to decode (with --deep, "
    "captures of 64 MiB or more: one per core, at most 4), and an audit shares its folds with a "
    "second process after the decode where that pays; 1: one process throughout. Same rows and "
    "findings whatever the number.")]
TopicOpt = Annotated[Optional[list[str]], typer.Option("--topic", help="Only this topic (repeatable).")]
PartitionOpt = Annotated[Optional[list[int]], typer.Option("--partition", help="Only this partition number (repeatable).")]
ProducerIdOpt = Annotated[Optional[list[int]], typer.Option("--producer-id", help="Only this producer id (repeatable).")]
TxnIdOpt = Annotated[Optional[list[str]], typer.Option("--transactional-id", help="Only this transactional id (repeatable).")]
SinceOpt = Annotated[Optional[str], typer.Option(
    "--since", help="Only what happened at or after this time (ISO-8601, or ms since the epoch).")]
UntilOpt = Annotated[Optional[str], typer.Option(
    "--until", help="Only what happened at or before this time (ISO-8601, or ms since the epoch).")]
MinSeverityOpt = Annotated[Optional[Severity], typer.Option(
    "--min-severity", help="Only findings at or above this severity (the table hides info by default "
    "and says how many incidents it hid; machine formats keep everything unless this is given).")]


class ManyPathsCommand(TyperCommand):
    """A command whose path options take several values after one flag, as a shell glob gives
    them and as the README writes them: `--segments node1/ node2/ node3/` is read as
    `--segments node1/ --segments node2/ --segments node3/` (click's options take one value per
    flag). The values run to the next argument that starts with '-' (a lone '-' is a value);
    `--segments=PATH` and the repeated flag keep their usual meaning."""

    many_options = ("--pcap", "--segments")

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, spread_many(args, self.many_options))


def spread_many(args: list[str], flags) -> list[str]:
    out: list[str] = []
    flag = None          # the path option whose values are being read
    for a in args:
        if a == "--":
            flag = None
        elif a in flags:
            flag = a
            out.append(a)
            continue
        elif flag is not None and (a == "-" or not a.startswith("-")):
            if out[-1] != flag:
                out.append(flag)
            out.append(a)
            continue
        else:
            flag = None
        out.append(a)
    return out


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(-])")


def sentences_help(app) -> None:
    """Help texts as sentences: each paragraph of a command's docstring flows as one text (the
    source's line breaks are not the reader's; typer's rich help keeps them, so a sentence broke
    mid-line), and the command list shows the first sentence alone."""
    for info in app.registered_commands:
        doc = info.help or inspect.getdoc(info.callback) or ""
        paragraphs = [" ".join(p.split()) for p in doc.split("\n\n") if p.strip()]
        info.help = "\n\n".join(paragraphs)
        if paragraphs and info.short_help is None:
            info.short_help = _SENTENCE_END.split(paragraphs[0], maxsplit=1)[0]
    for group in app.registered_groups:
        sentences_help(group.typer_instance)


@contextmanager
def frozen_heap():
    """What is alive on entry (an audit's run, the decoders' and rules' modules) is left out of
    the cyclic collector's collections until the exit: building a report allocates enough to
    trigger a full collection, which walked all of it again (~20 ms after the bench capture's
    audit). Given back on exit, so that an in-process caller's later collections still see it."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def err(message: str) -> None:
    from rich.console import Console

    Console(stderr=True, soft_wrap=True).print(message, highlight=False)


def exit_unreadable(errors, expected: str | None = None) -> None:
    for e in errors:
        err(f"[red]error:[/red] unreadable input: {e}")
    if expected:
        err(f"expected: {expected}")
    raise typer.Exit(EXIT_UNREADABLE)


def parse_time(value: Optional[str], option: str) -> Optional[int]:
    """ms since the epoch or ISO-8601 (no zone: UTC) -> ms since the epoch."""
    if value is None:
        return None
    if value.lstrip("-").isdigit():
        return int(value)
    from datetime import datetime, timezone

    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        err(f"[red]error:[/red] {option} {value!r}: give ms since the epoch or an ISO-8601 time")
        raise typer.Exit(EXIT_USAGE)
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1000)


def selection(topic=None, partition=None, producer_id=None, transactional_id=None, since=None, until=None,
              min_severity: Optional[Severity] = None):
    from kaudit.report.selection import Selection

    return Selection(topic=tuple(topic or ()), partition=tuple(partition or ()),
                     producer_id=tuple(producer_id or ()), transactional_id=tuple(transactional_id or ()),
                     since_ms=parse_time(since, "--since"), until_ms=parse_time(until, "--until"),
                     min_severity=min_severity.value if min_severity else None)


def inside(child: Path, parents: list[Path]) -> bool:
    c = child.resolve()
    for p in parents:
        p = p.resolve()
        if c == p or p in c.parents:
            return True
    return False


def pcap_options(kafka_port, max_batch_bytes: int, max_frame_bytes: int, deep: bool = False,
                 jobs: int | None = None, tls_keylog=None):
    from kaudit.sources.pcap import PcapOptions

    return PcapOptions(kafka_ports=frozenset(kafka_port or [9092]), deep=deep,
                       max_batch_bytes=max_batch_bytes, max_frame_bytes=max_frame_bytes, jobs=jobs,
                       tls_keys=load_keylog(tls_keylog))


def load_keylog(paths):
    """The KeyLog of --tls-keylog files (None: none given); exit 2 for a file that cannot be
    read or holds no key line (the message names the file, never a key)."""
    if not paths:
        return None
    from kaudit.capture.tls.keylog import KeyLog

    keys = KeyLog()
    for p in paths:
        try:
            one = KeyLog.from_files([p])
        except OSError as e:
            err(f"[red]error:[/red] --tls-keylog {p}: cannot read it ({e.strerror or e})")
            raise typer.Exit(EXIT_USAGE)
        if not one.lines:
            err(f"[red]error:[/red] --tls-keylog {p}: no key log line in it (NSS key log format: "
                "'CLIENT_RANDOM <client random> <master secret>' or the TLS 1.3 traffic secret labels)")
            raise typer.Exit(EXIT_USAGE)
        keys.add_text(Path(p).read_bytes(), str(p))
    return keys


LOG_DIR_EXPECTED = ("a broker's log dir (meta.properties and <topic>-<partition>/ folders of .log "
                    "segments), a folder of log dirs, a partition dir, or segment files "
                    "(NNNNNNNNNNNNNNNNNNNN.log, .index, .timeindex, .txnindex, .snapshot)")
CAPTURE_EXPECTED = "pcap or pcapng captures of Kafka traffic (or folders holding them)"


def check_log_plan(plan, paths) -> None:
    """Exit 3 when the inputs hold no Kafka file: say what was given and what was expected."""
    if any(t.kind != "skipped" for t in plan.targets):
        return
    from kaudit.sources.inputs import sniff

    why = [f"{t.path}: {t.reason}" for t in plan.targets if t.reason][:5]
    for p in paths:
        kind = sniff(str(p)) if Path(p).is_file() else None
        if kind is not None:
            why.append(f"{p} is a {kind} capture: audit it with `kaudit pcap`")
    exit_unreadable(plan.errors + why + ([] if plan.errors or why else
                                         [f"{', '.join(map(str, paths))}: no Kafka log data in it"]),
                    LOG_DIR_EXPECTED)


def captures_of(paths: list[Path]) -> tuple[list[str], list[str]]:
    """(capture files, errors): a folder stands for the captures in it."""
    from kaudit.sources.inputs import capture_files

    return capture_files([str(p) for p in paths])


def no_kafka_traffic(captures: dict, ports) -> str | None:
    """The reason to refuse captures that hold no Kafka connection (None: some do, or TLS
    connections that were not decrypted: the coverage and how to get their keys go to stderr)."""
    tls_notice(captures)
    if not captures or any(s.get("kafka_connections") or s.get("tls") for s in captures.values()):
        return None
    looked = ", ".join(map(str, sorted(ports or [9092])))
    return (f"no Kafka traffic in {', '.join(sorted(captures))}: kaudit looked for Kafka on port(s) {looked} "
            "and for Kafka request headers on every TCP port (give the brokers' ports with --kafka-port)")


def check_selection(sel, seen: dict | None) -> None:
    """Exit 3 when the selection names what the inputs do not hold (a topic, producer id, ...
    that appears nowhere, or a time outside the evidence): an empty selection says so."""
    if not sel or not seen:
        return
    msg = sel.unmatched(seen)
    if msg:
        err(f"[red]error:[/red] the selection matches nothing in the input: {msg}")
        raise typer.Exit(EXIT_UNREADABLE)


def tls_notice(captures: dict) -> None:
    """TLS coverage on stderr: connections decrypted and not (why), and how to obtain key logs
    when some were not decrypted."""
    if not any(s.get("tls") for s in captures.values()):   # nothing to say: no import of rich (~0.03 s)
        return
    from kaudit.capture.tls.coverage import HOWTO, summary_lines

    lines, missing = summary_lines({p: s.get("tls") or {} for p, s in captures.items()})
    for line in lines:
        err(line)
    if missing:
        err(HOWTO)
