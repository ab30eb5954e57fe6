"""What a person sees at a terminal: help texts as sentences, `kaudit rules` within the width,
the nearest rule ids for an unknown one, several paths after one path option, human times."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kaudit.audit import RULES
from kaudit.cli import app
from kaudit.cli_common import spread_many
from kaudit.report.columns import fit
from kaudit.timefmt import iso_ms, iso_s, relative, when

runner = CliRunner()


@pytest.mark.parametrize("columns", [80, 100, 60])
def test_rules_fit_the_width_and_keep_ids_whole(columns):
    r = runner.invoke(app, ["rules"], env={"COLUMNS": str(columns)})
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert all(len(x) <= columns for x in lines), [x for x in lines if len(x) > columns]
    firsts = {x.split()[0] for x in lines if x and not x.startswith(" ")}
    assert set(RULES) <= firsts
    # each title, unwrapped, reads as it is registered
    text = " ".join(x.strip() for x in lines)
    for rid in ("hanging-transaction", "aborted-read"):
        assert " ".join(RULES[rid].title.split()) in text


def test_fit_wraps_the_last_column_under_itself():
    out = fit(["id", "flags"], [["a-long-id", "word " * 30]], columns=40)
    lines = out.splitlines()
    assert lines[0].startswith("id") and set(lines[1]) == {"-"}
    assert all(len(x) <= 40 for x in lines)
    indent = len("a-long-id") + 2
    assert all(x.startswith(" " * indent) and x[indent] != " " for x in lines[3:])


def test_fit_puts_the_last_column_below_when_there_is_no_room():
    lines = fit(["id", "flags"], [["x" * 30, "some words here"]], columns=40).splitlines()
    assert lines[1] == "x" * 30 and lines[2] == "    some words here"


@pytest.mark.parametrize("typed,expected", [("duplicate", ["duplicate-batch", "duplicate-records"]),
                                            ("dupliate-batch", ["duplicate-batch"]),
                                            ("hanging", ["hanging-transaction"])])
def test_explain_suggests_the_nearest_rule_ids(typed, expected):
    r = runner.invoke(app, ["explain", typed])
    assert r.exit_code == 2
    assert "did you mean" in r.output and all(e in r.output for e in expected), r.output


def test_explain_without_a_near_id_names_the_list():
    r = runner.invoke(app, ["explain", "zzzz"])
    assert r.exit_code == 2 and "did you mean" not in r.output and "kaudit rules" in r.output


def test_select_suggests_the_nearest_rule_id(tmp_path):
    r = runner.invoke(app, ["segments", str(tmp_path), "--select", "fenced"])
    assert r.exit_code == 2 and "fenced-epoch" in r.output


def _commands(typer_app):
    yield from typer_app.registered_commands
    for group in typer_app.registered_groups:
        yield from _commands(group.typer_instance)


@pytest.mark.parametrize("command", [[], ["pcap"], ["audit"], ["decode"], ["decode", "pcap"], ["txn"]])
def test_help_flows_as_sentences(command):
    """A docstring's source line breaks are not the reader's: each paragraph of a command's help
    is one text (the terminal wraps it), and the command list shows one sentence."""
    r = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert r.exit_code == 0 and "Traceback" not in r.output
    for info in _commands(app):
        assert info.short_help and "\n" not in info.short_help, info.name
        assert info.short_help.endswith((".", ")")), info.short_help
        assert all("\n" not in p for p in info.help.split("\n\n")), info.name
        assert info.help.startswith(info.short_help), info.name


def test_several_paths_after_one_flag():
    assert spread_many(["--pcap", "a", "--segments", "n1/", "n2/", "n3/", "-f", "json"], ("--pcap", "--segments")) == [
        "--pcap", "a", "--segments", "n1/", "--segments", "n2/", "--segments", "n3/", "-f", "json"]
    assert spread_many(["--segments=x", "y"], ("--segments",)) == ["--segments=x", "y"]
    assert spread_many(["--segments", "a", "--", "b"], ("--segments",)) == ["--segments", "a", "--", "b"]


def test_audit_takes_the_readme_form(tmp_path):
    """`kaudit audit --pcap X --segments n1/ n2/`: both folders reach the audit (here: missing
    inputs, said as such - not "unexpected extra argument")."""
    r = runner.invoke(app, ["audit", "--pcap", str(tmp_path / "c.pcap"), "--segments", str(tmp_path / "n1"),
                            str(tmp_path / "n2")])
    assert "unexpected extra argument" not in r.output.lower()
    assert r.exit_code == 3, r.output


def test_no_timestamp_is_never_1969():
    assert iso_ms(-1) == "no timestamp" and iso_s(-1.0) == "no timestamp"
    assert when(-1, -1, 1_000_000) == "no timestamp"
    assert relative(-1, 1_000_000) == ""
    assert "1969" not in when(-1, 5_000, 10_000) and "1970-01-01T00:00:05.000Z" in when(-1, 5_000, 10_000)
    assert iso_ms(0) == "1970-01-01T00:00:00.000Z"


def test_txn_table_fits_the_width():
    demo = "fixtures/logdirs/demo"
    from tests.conftest import ROOT

    r = runner.invoke(app, ["txn", str(ROOT / demo)], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines and all(len(x) <= 80 for x in lines), [x for x in lines if len(x) > 80]
    assert lines[0].startswith("demo-txn-21  producer 2000 epoch 0: COMMIT")
    assert "    demo-txn-0 0 -> COMMIT@2 epoch 0 (coord epoch 0)" in lines


def test_a_sub_second_distance_is_said_in_milliseconds():
    """Only the same instant is "at the end of the evidence"; 450 ms before it is said as such
    (a span that began 450 ms before the end did not begin at it)."""
    assert relative(1_000, 1_000) == "at the end of the evidence"
    assert relative(550, 1_000) == "450 ms before the end of the evidence"
    assert relative(1_450, 1_000) == "450 ms after the end of the evidence"
    assert relative(0, 3_000) == "3 s before the end of the evidence"
    assert when(500, 900, 1_000).endswith("(400 ms; began 500 ms before the end of the evidence)")
