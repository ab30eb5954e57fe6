"""Every `kaudit ...` command of README.md and docs/*.md runs as written: exit 0 or 1, no
traceback. The docs' placeholders (`/var/kafka-logs`, `capture.pcap`, ...) are mapped to the
bundled samples or the corpus by PLACES; outputs go to a temporary folder (the current directory
of the run). Commands run in-process (typer's runner), but for a pipeline (`tcpdump ... | kaudit
pcap -`), which runs as a process fed a sample capture on its standard input."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import CORPUS, ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
V4 = "{corpus}/real-kafka-4.1.0/v4-idem-retry-java"   # three brokers' log dirs and their capture
# placeholder in the docs -> a path under the repository ({corpus}: the shared corpus; without it
# the capture falls back to a bundled sample and the three brokers' commands skip)
PLACES = {
    "/var/kafka-logs": "fixtures/logdirs/demo",
    "/var/kafka-logs-tiered": "fixtures/logdirs/tiered/node1", "/mnt/tiered-copy": "fixtures/logdirs/tiered/remote",
    "node1/": f"{V4}/logdirs/node1", "node2/": f"{V4}/logdirs/node2", "node3/": f"{V4}/logdirs/node3",
    "capture.pcap": f"{V4}/v4-idem-retry-java.pcap",
    "captures/": "pcaps",
    "a.pcapng": "pcaps/02-retry-idem-java.pcap",
    "b.pcap": "pcaps/02-retry-noidem-confluent.pcap",
    "my-topic-0/00000000000000000000.log": "fixtures/logdirs/demo/demo-payments-0/00000000000000000000.log",
    "/var/tmp/kafka.pcap": "pcaps/05-fence-java.pcap",
    "keys.log": "fixtures/tls/docs-example.keylog",
}
FALLBACK = {"capture.pcap": "pcaps/05-fence-java.pcap"}
EDITS = {"--follow-idle 60": "--follow-idle 0.2"}   # a wait the docs give a person, shortened
# Spark commands start a JVM (tests/engine run the Spark engine on the same inputs)
SPARK = re.compile(r"--engine spark|--master ")


def doc_commands() -> list[tuple[str, str]]:
    """(where, command line) of every kaudit command in the docs' sh code blocks."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in re.findall(r"^```(?:sh|bash|shell)\n(.*?)^```", text, re.S | re.M):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.strip()
                if re.match(r"(python3? -m )?kaudit\b", line) or re.search(r"\|\s*kaudit\b", line):
                    found.append((doc.name, line))
    return found


COMMANDS = doc_commands()
RUNS: dict = {}   # (argv, piped) -> (exit code, output, exception): a command the docs repeat runs once


def test_the_docs_have_commands():
    names = {where for where, _ in COMMANDS}
    assert "README.md" in names and len(COMMANDS) >= 15, COMMANDS


def _argv(line: str) -> tuple[list[str], bool]:
    """The command's arguments with the placeholders mapped, and whether it reads standard input."""
    for a, b in EDITS.items():
        line = line.replace(a, b)
    piped = "|" in line
    if piped:
        line = line.rsplit("|", 1)[1]
    words = shlex.split(line, comments=True)
    words = words[3:] if words[0].startswith("python") else words[1:]
    out = []
    for w in words:
        if w in PLACES:
            w = _place(w)
        out.append(w)
    return out, piped


def _place(word: str) -> str:
    place = PLACES[word]
    if "{corpus}" not in place:
        return str(ROOT / place)
    if CORPUS.is_dir():
        return place.format(corpus=CORPUS)
    if word in FALLBACK:
        return str(ROOT / FALLBACK[word])
    pytest.skip(f"{word} is mapped to the corpus, not found at {CORPUS}")


@pytest.mark.parametrize("where,line", COMMANDS, ids=[f"{w}: {c[:70]}" for w, c in COMMANDS])
def test_doc_command_runs(where, line, tmp_path, monkeypatch):
    if SPARK.search(line):
        pytest.skip("starts Spark (a JVM): the Spark engine's tests run it")
    args, piped = _argv(line)
    monkeypatch.chdir(tmp_path)   # the docs' outputs (report.json, rows/) land here
    done = RUNS.get((tuple(args), piped))
    if done is not None:   # the same command in another document: run once
        code, output, crash = done
    elif piped:   # `tcpdump ... | kaudit pcap -`: a sample capture on standard input
        with open(_place("capture.pcap"), "rb") as stdin:
            p = subprocess.run([sys.executable, "-m", "kaudit", *args], stdin=stdin, capture_output=True,
                               env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
        code, output, crash = p.returncode, p.stdout.decode() + p.stderr.decode(), None
    else:
        from kaudit.cli import app

        r = CliRunner().invoke(app, args)
        code, output = r.exit_code, r.output
        crash = r.exception if r.exception is not None and not isinstance(r.exception, SystemExit) else None
    RUNS[(tuple(args), piped)] = code, output, crash
    assert crash is None, f"{where}: {line}\n" + "".join(traceback.format_exception(crash))
    assert "Traceback" not in output, f"{where}: {line}\n{output[-3000:]}"
    assert code in (0, 1), (f"{where}: {line} exited {code} (an input the docs name for the reader? map it "
                            f"to a sample in PLACES)\n{output[-2000:]}")
