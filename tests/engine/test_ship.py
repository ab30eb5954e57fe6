"""engine.ship without a cluster: the zip kaudit sends to executors, and the one line a failed
probe becomes (the cluster itself: test_cluster.py)."""

from __future__ import annotations

import os
import zipfile

from kaudit.engine import ship


def test_the_package_zip_unpacks_as_kaudit_with_its_compiled_core(tmp_path):
    path = ship.package_archive(str(tmp_path))
    assert ship.package_archive(str(tmp_path)) == path   # once per content
    names = zipfile.ZipFile(path).namelist()
    assert "__init__.py" in names and "engine/ship.py" in names and "engine/log4j2.properties" in names
    built = [n for n in names if n.endswith(".so")]
    here = [os.path.relpath(os.path.join(d, f), ship.package_dir()) for d, _, fs in os.walk(ship.package_dir())
            for f in fs if f.endswith(".so")]
    assert sorted(built) == sorted(here)
    assert not any("__pycache__" in n or n.endswith((".pyc", ".pyx", ".c")) for n in names)


def test_a_failed_probe_is_one_line():
    java = ("An error occurred while calling o57.collectToPython.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 failed 4 "
            "times, most recent failure: Lost task 0.3 (executor 1): org.apache.spark.api.python.PythonException: "
            "Traceback (most recent call last):\n  File \"/x/pyspark.zip/pyspark/worker.py\", line 3, in main\n"
            "ModuleNotFoundError: No module named 'pyarrow'\n\n\tat org.apache.spark.api.python.BasePythonRunner"
            ".handlePythonException(PythonRunner.scala:1)\n")
    assert ship.one_line(java) == "ModuleNotFoundError: No module named 'pyarrow'"
    spawn = ("An error occurred\n: java.io.IOException: Cannot run program \"/no/python\": error=2, No such file\n"
             "\tat java.base/java.lang.ProcessBuilder.start(ProcessBuilder.java:1143)\n"
             "Caused by: java.io.IOException: error=2, No such file or directory\n")
    assert ship.one_line(spawn) == "java.io.IOException: error=2, No such file or directory"
    assert ship.one_line("") == "failed"


def test_local_masters():
    assert ship.is_local("local[2]") and ship.is_local("local") and not ship.is_local("spark://h:7077")


def test_an_input_gone_at_the_executor_is_an_error_naming_it_and_the_executor(tmp_path):
    """The driver planned the file, the executor cannot open it (unmounted, other permissions):
    the task reports it as an error - no decode, no Python traceback - that the CLI prints as
    unreadable input (exit 3)."""
    import pickle
    import shutil

    import pyarrow as pa

    from kaudit.engine.plan import disk_audit
    from kaudit.engine.spark_tasks import META, PAYLOAD, TAG, Job, read_tasks
    from kaudit.sources.splits import split_plan

    root = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "logdirs", "demo")
    shutil.copytree(root, tmp_path / "logs")
    audit = disk_audit([str(tmp_path / "logs")], folds=())
    gone = next(t.path for t in audit.layout.targets if t.kind == "log")
    os.remove(gone)
    job = Job(audit, [(t, False) for t in split_plan(audit.layout, 1 << 30)])
    facts = [pickle.loads(p) for rb in read_tasks(job, [pa.RecordBatch.from_pydict({"id": list(range(len(job.tasks)))})])
             for tag, p in zip(rb.column(TAG).to_pylist(), rb.column(PAYLOAD).to_pylist()) if tag == META]
    errors = [e for f in facts for _, e in f.errors]
    assert len(errors) == 1 and errors[0].startswith(f"{gone}: not readable on host ")
    assert errors[0].endswith(": No such file or directory")
