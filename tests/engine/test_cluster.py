"""A real Spark standalone cluster on 127.0.0.1: a master and two workers, separate processes
started by the lines of docs/spark.md ("On a cluster", on free ports), whose executors run
a Python that has kaudit's dependencies but not kaudit - kaudit ships itself (engine.ship).

`kaudit segments` and `kaudit pcap` there give the local engine's report; docs/spark.md's
`register(spark)` snippet runs as written (locally from the project's environment, and on the
cluster); an input the executors cannot see fails in one line naming the path and the executor.
Every driver is a subprocess (this test process keeps its own local session); every process is
torn down by process group, even when a test fails."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = os.path.dirname(sys.executable)
LOGS = "real-kafka-3.0.2/logdirs-final"
CAPTURE = "real-kafka-3.0.2/pcap/03-txn-java.pcap"


def fenced_blocks(lang: str) -> list[list[str]]:
    text = (ROOT / "docs" / "spark.md").read_text()
    return [b.strip("\n").splitlines() for b in re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)]


def cluster_steps() -> list[str]:
    (block,) = [b for b in fenced_blocks("sh") if any("deploy.master.Master" in x for x in b)]
    return block


def register_snippet() -> str:
    (block,) = [b for b in fenced_blocks("python") if any("register(spark)" in x for x in b)]
    return "\n".join(block)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _kill(proc: subprocess.Popen) -> None:
    """The process and everything it started (a worker's executors and their Python workers)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        try:   # the leader is gone; its group may not be
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return


@pytest.fixture(scope="module")
def deps_python(tmp_path_factory) -> str:
    """A Python with kaudit's dependencies and not kaudit: a venv whose site-packages points at
    this environment's (a .pth line adds the folder; the editable install's own .pth there is not
    processed, so `import kaudit` fails)."""
    env = tmp_path_factory.mktemp("deps")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env / "venv")], check=True)
    site = subprocess.run([str(env / "venv/bin/python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    dirs = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    Path(site, "kaudit-deps.pth").write_text("\n".join(dirs) + "\n")
    python = str(env / "venv/bin/python")
    probe = subprocess.run([python, "-c", "import pyarrow, crc32c, kio, zstandard\nimport kaudit"], cwd=str(env),
                           capture_output=True, text=True, env=_clean_env())
    assert "No module named 'kaudit'" in probe.stderr, probe.stderr   # the executors' own Python lacks it
    return python


def _clean_env(**extra) -> dict:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "JAVA_HOME", "TMPDIR", "KAUDIT_STRICT_ORDER")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(extra)
    return env


class Cluster:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []
        self.master, self.ui, w1, w2 = _free_ports(4)
        self.subst = {"7077": str(self.master), "8080": str(self.ui), "8081": str(w1), "8082": str(w2)}
        # the project's environment, activated: `python` and `kaudit` are its own
        self.env = _clean_env(PATH=f"{VENV_BIN}:{os.environ.get('PATH', '')}",
                              SPARK_WORKER_DIR=str(tmp / "work"))
        self.commands: list[str] = []

    def line(self, text: str) -> str:
        for a, b in self.subst.items():
            text = re.sub(rf"\b{a}\b", b, text)
        return text

    def start(self) -> None:
        for raw in cluster_steps():
            text = self.line(raw.split(" #")[0].strip()) if not raw.startswith("#") else ""
            if not text:
                continue
            if text.startswith("export "):
                name, _, _ = text[len("export "):].partition("=")
                out = subprocess.run(["bash", "-c", f"{text}; printf %s \"${name}\""], env=self.env,
                                     capture_output=True, text=True, check=True).stdout
                self.env[name] = out
            elif text.endswith("&"):
                log = open(self.tmp / f"daemon{len(self.procs)}.log", "w")
                self.procs.append(subprocess.Popen(["bash", "-c", "exec " + text[:-1]], env=self.env, stdout=log,
                                                   stderr=subprocess.STDOUT, start_new_session=True, cwd=str(self.tmp)))
            else:
                self.commands.append(text)

    def wait_for_workers(self, n: int, timeout: float = 120) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as r:
                    if json.load(r).get("aliveworkers", 0) >= n:
                        return
            except (OSError, ValueError):   # not listening yet, or an empty page while the UI starts
                pass
            time.sleep(0.5)
        logs = "\n".join(p.read_text()[-2000:] for p in self.tmp.glob("daemon*.log"))
        raise AssertionError(f"the cluster did not come up:\n{logs}")

    def stop(self) -> None:
        for p in reversed(self.procs):
            _kill(p)


# One driver process runs the kaudit lines of docs/spark.md (and the unreadable input) one after the
# other through kaudit's own entry point, as `kaudit ...` would: one application, its executors
# started once (each application costs ~20 s of JVMs here).
DRIVER = '''
import contextlib, io, json, sys
from kaudit import cli
commands, snippet, logs, capture = json.loads(sys.argv[1]), *sys.argv[2:5]
results = []
for argv in commands:
    sys.argv = ["kaudit", *argv]
    err = io.StringIO()
    code = 0
    with contextlib.redirect_stderr(err):
        try:
            cli.main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    results.append({"code": code, "stderr": err.getvalue()})
# the register snippet of docs/spark.md, as written, in the application kaudit started on the cluster
from pyspark.sql import SparkSession
spark = SparkSession.getActiveSession()
paths = [capture]
exec(snippet.replace("/var/kafka-logs", logs))
results.append([batches.count(), frames.count()])
print(json.dumps(results))
'''

# The snippet as written in a fresh process of the project's environment, not activated (the
# Python workers' default, `python3` on PATH, is not this interpreter), then with executors that
# have no usable Python (one line, no worker traceback).
SNIPPET_RUN = '''
import json, sys
from pyspark.sql import SparkSession
from kaudit.engine.ship import ExecutorSetupError
logs, capture = sys.argv[1:3]
paths = [capture]
counts = {}
for name, b in [("local", SparkSession.builder),
                ("bad", SparkSession.builder.master("local[1]").config("spark.pyspark.python", "/nonexistent/python"))]:
    spark = b.getOrCreate()
    try:
        exec(SNIPPET.replace("/var/kafka-logs", logs))
        counts[name] = [batches.count(), frames.count()]
    except ExecutorSetupError as e:
        counts[name] = str(e)
    spark.stop()
print(json.dumps(counts))
'''


def _readme_commands(c: Cluster, corpus, deps_python) -> list[list[str]]:
    """The kaudit lines of docs/spark.md on the corpus (executors on `deps_python`), as argument lists."""
    logs, capture = str(corpus / LOGS), str(corpus / CAPTURE)
    out = []
    for cmd in c.commands:
        assert cmd.startswith("kaudit "), cmd
        cmd = (cmd.replace("/var/kafka-logs", logs).replace("capture.pcap", capture)
               .replace("/opt/kaudit-deps/bin/python", deps_python))
        out.append(shlex.split(cmd)[1:])
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory, corpus, deps_python):
    """Starts the cluster, runs both drivers (the snippet's starts with its local session while
    the workers come up), tears everything down; their outputs."""
    tmp = tmp_path_factory.mktemp("cluster")
    c = Cluster(tmp)
    logs, capture = str(corpus / LOGS), str(corpus / CAPTURE)
    (tmp / "logs").symlink_to(corpus / LOGS)
    (tmp / "snippet.py").write_text(f"SNIPPET = {register_snippet()!r}\n{SNIPPET_RUN}")
    procs = []
    try:
        c.start()
        # the project's environment, not activated: the Python workers' default (`python3` on
        # PATH) is not this interpreter
        env = dict(c.env, PATH=os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                               if p != VENV_BIN))
        procs.append(_start([sys.executable, str(tmp / "snippet.py"), logs, capture], env, tmp))
        c.wait_for_workers(2)
        commands = _readme_commands(c, corpus, deps_python)
        assert [x[0] for x in commands] == ["segments", "pcap"]
        # `/proc/self/cwd/logs` is this driver's folder; an executor's own cwd has no `logs`: the
        # path exists where kaudit plans and not where it reads - as a path not mounted on a worker
        unseen = [("/proc/self/cwd/logs" if x == logs else x) for x in commands[0]]
        argv = [[*x, "--format", "json", "-o", str(tmp / f"out{n}.json")]
                for n, x in enumerate(commands + [unseen])]
        procs.append(_start([sys.executable, "-c", DRIVER, json.dumps(argv), register_snippet(), logs, capture], c.env,
                            tmp))
        outs = [_finish(p) for p in procs]
        yield {"cluster": c, "commands": commands, "snippet": outs[0], "driver": outs[1], "tmp": tmp}
    finally:
        for p in procs:
            _kill(p)
        c.stop()


def _start(argv: list[str], env: dict, cwd) -> subprocess.Popen:
    """A driver, its outputs into files (a pipe nobody reads while another driver is waited
    for would stall it, and the application holding the executors with it)."""
    n = len(list(Path(cwd).glob("driver*.out")))
    out, err = (open(Path(cwd) / f"driver{n}.{x}", "w+") for x in ("out", "err"))
    p = subprocess.Popen(argv, env=env, cwd=str(cwd), stdout=out, stderr=err, text=True, start_new_session=True)
    p.outputs = (out, err)
    return p


def _finish(p: subprocess.Popen, timeout: float = 400):
    p.wait(timeout)
    out, err = (f.seek(0) or f.read() for f in p.outputs)
    assert p.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1]), err


def _strip(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in ("engine", "application_id")}


def test_readme_cluster_runs_segments_and_pcap_as_the_local_engine(runs):
    from typer.testing import CliRunner

    from kaudit.cli import app

    results, _ = runs["driver"]
    for n, argv in enumerate(runs["commands"]):
        r = results[n]
        assert r["code"] in (0, 1), r["stderr"][-3000:]
        assert "Traceback" not in r["stderr"] and "at org.apache" not in r["stderr"], r["stderr"][-3000:]
        spark = json.loads((runs["tmp"] / f"out{n}.json").read_text())
        local_argv = [a for i, a in enumerate(argv) if a not in ("--master", "--spark-conf")
                      and argv[i - 1] not in ("--master", "--spark-conf")]
        local = CliRunner().invoke(app, [*local_argv, "--engine", "local", "--format", "json"])
        assert local.exit_code == r["code"], local.output
        assert spark["engine"] == "spark" and spark["application_id"].startswith("app-")
        assert _strip(spark) == _strip(json.loads(local.stdout))
    assert json.loads((runs["tmp"] / "out0.json").read_text())["findings"]
    # both workers ran an executor of the application, each with kaudit unpacked from the
    # driver's zip (their own Python has no kaudit: deps_python), compiled core included
    app_dir = runs["cluster"].tmp / "work" / spark["application_id"]
    executors = sorted(p.name for p in app_dir.iterdir() if p.is_dir())
    assert len(executors) == 2, executors
    for e in executors:
        assert (app_dir / e / "kaudit" / "__init__.py").is_file()
        assert list((app_dir / e / "kaudit").glob("protocol/_cbatch*.so"))


def test_an_input_the_executors_cannot_see_fails_in_one_line(runs):
    r = runs["driver"][0][2]
    assert r["code"] == 3, r["stderr"][-3000:]
    assert "Traceback" not in r["stderr"] and "at org.apache" not in r["stderr"] and "py4j" not in r["stderr"]
    errors = [x for x in r["stderr"].splitlines() if "unreadable input" in x]
    assert errors and all(re.search(r"/proc/self/cwd/logs/\S+: not readable on executor \d+ \(host [^)]+\): "
                                     r"No such file or directory", x) for x in errors), r["stderr"]


def test_readme_register_snippet_as_written(runs, corpus):
    """Locally from the project's environment, on the cluster (in the application of the kaudit
    lines), and with executors that have no usable Python (one line, no worker traceback)."""
    from kaudit.engine import local as L
    from kaudit.sources.pcap import PcapOptions

    counts, err = runs["snippet"]
    counts["cluster"] = runs["driver"][0][3]
    logs, capture = str(corpus / LOGS), str(corpus / CAPTURE)
    _, chunks = L.decode_segments([logs])
    batches = sum(t.num_rows for k, t in chunks if k == "batch")
    _, chunks = L.decode_pcaps([capture], PcapOptions(kafka_ports=frozenset({9092, 9093})), {})
    frames = sum(t.num_rows for k, t in chunks if k == "frame")
    assert counts["local"] == counts["cluster"] == [batches, frames] and batches and frames, err[-3000:]
    assert "/nonexistent/python" in counts["bad"] and "cannot import kaudit" in counts["bad"]
    assert "spark.pyspark.python" in counts["bad"] and "\n" not in counts["bad"]
