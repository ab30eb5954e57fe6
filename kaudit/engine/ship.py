"""kaudit on Spark executors that do not have it installed (docs/spark.md, On a cluster).

The executors need a Python with kaudit's dependencies; kaudit itself goes with the application:
its package as this process imports it - compiled core included, built for this machine - zipped
once (cached by content) and added with `SparkContext.addArchive(zip#kaudit)`. Each executor
unpacks it as `kaudit/` into its files directory, which pyspark's worker puts first on sys.path,
so the executors run the driver's very kaudit. A probe job then imports it on every executor: a
Python that cannot (no pyarrow there, no such interpreter) fails here in one line that says what
to do, not in a worker traceback.

On one machine (`local[...]`) the executors are this machine's processes: they run this
interpreter (PYSPARK_PYTHON unless set), nothing is shipped.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
import zipfile

HOW = ("give the executors a Python with kaudit's dependencies (pyarrow, numpy, pandas, crc32c, lz4, "
       "zstandard, cramjam, kio): --spark-conf spark.pyspark.python=PATH or PYSPARK_PYTHON "
       "(docs/spark.md, On a cluster)")
_SKIP_DIRS = {"__pycache__"}
_SKIP_ENDS = (".pyc", ".pyx", ".pxd", ".pxi", ".c", ".h")


class ExecutorSetupError(RuntimeError):
    """The executors cannot run kaudit: one line, what failed and what to do."""


def package_dir() -> str:
    import kaudit

    return os.path.dirname(os.path.abspath(kaudit.__file__))


def _files(root: str) -> list[str]:
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS)
        out.extend(os.path.relpath(os.path.join(d, f), root) for f in sorted(files)
                   if not f.endswith(_SKIP_ENDS))
    return out


def package_archive(directory: str | None = None) -> str:
    """A zip of kaudit's package (its files at the root: it unpacks as the `kaudit` folder),
    written once per content into `directory` (default: the temp dir)."""
    root = package_dir()
    files = _files(root)
    digest = hashlib.sha256()
    for f in files:
        st = os.stat(os.path.join(root, f))
        digest.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    from kaudit import __version__

    path = os.path.join(directory or tempfile.gettempdir(), f"kaudit-{__version__}-{digest.hexdigest()[:16]}.zip")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            for f in files:
                z.write(os.path.join(root, f), f)
        os.replace(tmp, path)
    return path


def is_local(master: str | None) -> bool:
    return master is None or master.startswith("local")


def prepare(spark) -> None:
    """Makes kaudit importable by the session's executors, or raises ExecutorSetupError (once
    per SparkContext)."""
    try:
        sc = spark.sparkContext
    except Exception:   # a Spark Connect session: its server's executors are configured there
        return
    if getattr(sc, "_kaudit_ready", False):
        return
    python = sc.getConf().get("spark.pyspark.python", None)
    if python:   # honoured under spark-submit only (it sets PYSPARK_PYTHON); here too
        sc.pythonExec = python
    elif is_local(sc.master) and "PYSPARK_PYTHON" not in os.environ:
        sc.pythonExec = sys.executable   # this machine's workers: this interpreter
    if not (is_local(sc.master) and sc.pythonExec == sys.executable):
        sc.addArchive(package_archive() + "#kaudit")
        failures = [f for f in probe(spark) if f[0]]
        if failures:
            why, host = failures[0][0], failures[0][3]
            raise ExecutorSetupError(f"the Spark executors' Python ({sc.pythonExec}, on {host}) cannot import "
                                     f"kaudit: {why}; {HOW}")
    sc._kaudit_ready = True


# The probe is pickled by value (its module is not importable on an executor without kaudit);
# an Arrow task, as the engine's own: the Python worker it starts serves the audit's tasks next.
_PROBE = '''
def probe(batches):
    import socket, sys
    import pyarrow as pa
    try:
        import kaudit.engine.spark_tasks
        import kaudit
        row = [None, kaudit.__file__]
    except BaseException as e:
        row = ["%s: %s" % (type(e).__name__, e), None]
    for _ in batches:
        yield pa.RecordBatch.from_pydict({"error": [row[0]], "file": [row[1]], "python": [sys.executable],
                                          "host": [socket.gethostname()]})
'''


def probe(spark) -> list[tuple]:
    """(error or None, kaudit's file, interpreter, host) from one task per executor core."""
    sc = spark.sparkContext
    space: dict = {"__name__": "kaudit_probe"}
    exec(_PROBE, space)
    n = max(1, sc.defaultParallelism)
    try:
        rows = spark.range(0, n, 1, n).mapInArrow(space["probe"], "error string, file string, python string, "
                                                                   "host string").collect()
        return [tuple(r) for r in rows]
    except Exception as e:   # the interpreter does not start, or dies: its own last words
        return [(one_line(str(e)), None, sc.pythonExec, "an executor")]


_LAST_WORDS = re.compile(r"^\s*(?:Caused by: )?([\w.]*(?:Error|Exception)(?:: .*)?)$")


def one_line(text: str) -> str:
    """The telling line of a Java/py4j error text: the last `SomeError: message` that is no
    stack frame (a Python worker's own exception comes last)."""
    lines = [m.group(1) for m in map(_LAST_WORDS.match, text.splitlines()) if m]
    python = [x for x in lines if not x.startswith(("org.", "java.", "py4j.", "scala."))]
    return (python or lines or [text.strip().splitlines()[0] if text.strip() else "failed"])[-1][:500]
