"""kaudit.lean: the modules a local-engine process refuses, and that nothing it runs needs them."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PCAP = sorted((ROOT / "pcaps").glob("*.pcap"))[0]


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_refused_modules_raise_not_found_and_pyarrow_converts_without_them():
    r = _python(
        "from kaudit.lean import refuse\n"
        "refuse()\n"
        "import pyarrow as pa\n"
        "assert pa.array([1, 2, None]).null_count == 1\n"
        "import pyarrow.compute as pc\n"   # a bare Python value: its type inferred (dateutil's check)
        "assert pc.equal(pa.array(['a', 'b']), 'a').to_pylist() == [True, False]\n"
        "for name in ('pandas', 'hypothesis', 'pandas.core', 'dateutil', 'dateutil.relativedelta'):\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except ModuleNotFoundError as e:\n"
        "        assert e.name == name.partition('.')[0]\n"
        "    else:\n"
        "        raise SystemExit(name + ' imported')\n"
        "import sys; assert 'pandas' not in sys.modules and 'dateutil' not in sys.modules\n")
    assert r.returncode == 0, r.stderr


def test_command_line_refuses_them_only_for_the_local_engine():
    code = ("import sys; sys.argv = ['kaudit'] + sys.argv[1:]\n"
            "import atexit\n"
            "atexit.register(lambda: print('LOADED', 'pandas' in sys.modules, 'hypothesis' in sys.modules,"
            " 'dateutil' in sys.modules, file=sys.stderr))\n"
            "from kaudit.cli import main; main()\n")
    r = subprocess.run([sys.executable, "-c", code, "decode", "pcap", str(PCAP), "--format", "ndjson",
                        "--engine", "local"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "LOADED False False False" in r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert any(row["kind"] == "batch" for row in rows)


def test_commands_run_in_process_leave_imports_alone():
    from kaudit import cli_engine

    assert cli_engine.LEAN_LOCAL is False


def test_a_live_capture_refuses_them_too():
    """`kaudit pcap -` runs the local engine without choosing one: hours of pandas held for nothing."""
    code = ("import sys; sys.argv = ['kaudit'] + sys.argv[1:]\n"
            "import atexit\n"
            "atexit.register(lambda: print('LOADED', 'pandas' in sys.modules, 'hypothesis' in sys.modules,"
            " 'dateutil' in sys.modules, file=sys.stderr))\n"
            "from kaudit.cli import main; main()\n")
    r = subprocess.run([sys.executable, "-c", code, "pcap", "-", "--format", "ndjson"], input=PCAP.read_bytes(),
                       capture_output=True, cwd=ROOT, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    assert b"LOADED False False False" in r.stderr
