"""kaudit.cli_coerce: the plain coercion gives typer's values and typer's errors, and a decode
command imports no pydantic."""

from __future__ import annotations

import subprocess
import sys
from enum import Enum
from pathlib import Path

import pytest
import typer

from kaudit import cli_coerce

pytest.importorskip("typer._coercion", reason="a typer without pydantic coercion: nothing to put in front of")
from typer._click.exceptions import BadParameter  # noqa: E402
from typer._coercion import resolve_type_descriptor  # noqa: E402
from typer.models import OptionInfo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
cli_coerce.install()   # as kaudit.cli does


class Fmt(str, Enum):
    ndjson = "ndjson"
    json = "json"


def _typers_own(descriptor):
    from typer._coercion import build_runtime_param

    return build_runtime_param(descriptor)


CASES = [
    (str, {}, ["x", "", " a b ", "é"]),
    (int, {}, ["0", "12", "-3", " 12 ", "1_000", "+5", "1.0", "0x10", "abc", "", "１２", 7]),
    (int, {"min": 1}, ["1", "0", "-1", "99"]),
    (int, {"min": 1024}, ["1024", "1023", "67108864"]),
    (float, {"min": 0.0}, ["0", "1.5", "-1", "5.", ".5", "1e3", "nan", "x"]),
    (Fmt, {}, ["json", "JSON", "ndjson", "xml", Fmt.json]),
    (Fmt, {"case_sensitive": False}, ["JSON", "Json", "xml"]),
    (Path, {}, ["a/b", ".", "", "/nonexistent/x"]),
    (Path, {"exists": True}, [".", "/nonexistent/x"]),
    (list[str], {}, [["a", "b"], []]),
    (list[int], {}, [["1", "2"], ["1", "x"], []]),
    (list[Path], {}, [["a", "b"]]),
]


def _outcome(runtime, value):
    try:
        return "ok", runtime._coerce_value(value, param=None, ctx=None)
    except BadParameter as e:
        return "error", e.message


@pytest.mark.parametrize("annotation,options,values", CASES)
def test_plain_coercion_gives_typers_values_and_errors(annotation, options, values):
    descriptor = resolve_type_descriptor(annotation, OptionInfo(**options))
    plain = typer.core.build_runtime_param(descriptor)
    own = _typers_own(descriptor)
    assert type(plain).__name__ == "PlainFirst"
    for v in values:
        a, b = _outcome(plain, v), _outcome(own, v)
        assert a == b and type(a[1]) is type(b[1]), (annotation, options, v)


def test_a_decode_command_imports_no_pydantic(tmp_path):
    code = ("import sys; sys.argv = ['kaudit'] + sys.argv[1:]\n"
            "import atexit\n"
            "atexit.register(lambda: print('PYDANTIC', 'pydantic' in sys.modules, file=sys.stderr))\n"
            "from kaudit.cli import main; main()\n")
    r = subprocess.run([sys.executable, "-c", code, "decode", "segments", str(ROOT / "fixtures/logdirs/demo"),
                        "--format", "parquet", "--output", str(tmp_path / "out"), "--jobs", "1",
                        "--partition", "0", "--kind", "batch"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "PYDANTIC False" in r.stderr


def test_install_is_idempotent_and_keeps_typers_for_files():
    before = typer.core.build_runtime_param
    cli_coerce.install()
    assert typer.core.build_runtime_param is before
