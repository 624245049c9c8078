"""Tests of command_history.py: the history command's parser, its argument types and its
handler, called in-process through its own parser."""

import argparse
import json

import pytest

from router_latency.errors import RouterLatencyError
from router_latency.command_history import add_history_parser
from conftest import history_rounds_folder

# its files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


def parser():
    top = argparse.ArgumentParser(prog="router-latency")
    add_history_parser(top.add_subparsers(dest="command", required=True))
    return top


def parsed(*argv):
    return parser().parse_args(["history", *map(str, argv)])


def refused_option(capsys, *argv):
    """Return the error message argparse gives for argv (exit 2)."""
    with pytest.raises(SystemExit) as exited:
        parsed(*argv)
    assert exited.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


def test_the_parser_reads_each_option_with_its_type_and_default():
    args = parsed("add", "--history", "h.jsonl", "--dir", "d", "--base", "main", "--new",
                  "merge", "--commit", "abc1234", "--date", "2026-01-31T12:00:00+02:00",
                  "--label", "v1.2 (rc)", "--tolerance", "2.5")
    assert (args.action, args.history, args.base, args.new, args.commit) == \
        ("add", "h.jsonl", "main", "merge", "abc1234")
    assert args.date == "2026-01-31T10:00:00Z"  # UTC
    assert args.label == "v1.2 (rc)" and args.tolerance == 2.5
    report = parsed("report", "--history", "h.jsonl")
    assert (report.format, report.tolerance, report.gate, report.allow_mismatch) == \
        ("text", 5.0, False, [])
    assert parsed("add", "--history", "h", "--date", "2026-01-31").date == \
        "2026-01-31T00:00:00Z"


@pytest.mark.parametrize("argv, message", [
    (["--commit=-x"], "expected 1 to 200 letters, digits or _./+- (not starting with one of "
                         "those signs), got '-x'"),
    (["--commit", "a b"], "got 'a b'"),
    (["--commit", "a" * 201], "expected 1 to 200 letters"),
    (["--tolerance", "1000"], "expected a percentage from 0 to 1000, got '1000'"),
    (["--tolerance", "-1"], "expected a percentage from 0 to 1000, got '-1'"),
    (["--tolerance", "x"], "expected a percentage from 0 to 1000, got 'x'"),
    (["--date", "31/01/2026"], "expected an ISO 8601 date, got '31/01/2026'"),
    (["--label", " "], "expected a label of 1 to 200 printable characters"),
    (["--label", "a\tb"], "expected a label of 1 to 200 printable characters"),
])
def test_a_bad_value_is_refused_while_parsing(capsys, argv, message):
    assert message in refused_option(capsys, "add", "--history", "h", *argv)


@pytest.mark.parametrize("argv, message", [
    (["add", "--gate"], "--gate is an option of history report (history add)"),
    (["report", "--label", "x"], "--label is an option of history add (history report)"),
    # every option of the other action names that action, --format too (it said 'add')
    (["add", "--format", "json"], "--format is an option of history report (history add)"),
    (["add", "--html", "p.html"], "--html is an option of history report (history add)"),
    (["report", "--each", "p"], "--each is an option of history add (history report)"),
    (["add"], "give one of --dir, --each or --run (history add)"),
    (["add", "--dir", "d", "--run", "r"], "give one of --dir, --each or --run (history add)"),
    (["add", "--dir", "d"], "--each takes each commit from its folder's name; --dir and --run "
                            "need --commit (history add)"),
    (["add", "--each", "p", "--commit", "c"], "--each takes each commit"),
    (["add", "--each", "p", "--label", "x"], "--label, --base-commit and --date name one "
                                             "commit, not those of --each (history add)"),
    (["add", "--dir", "d", "--commit", "c", "--base", "a", "--new", "a"],
     "--base and --new name the two sides, each a different one (history add)"),
])
def test_options_that_do_not_go_together_are_one_error_before_any_file_is_read(
        tmp_path, argv, message):
    store = tmp_path / "h.jsonl"
    args = parsed(argv[0], "--history", store, *argv[1:])
    with pytest.raises(RouterLatencyError) as raised:
        args.func(args)
    assert message in str(raised.value)
    assert not store.exists()


def test_add_then_report_prints_each_entry_and_the_trend(tmp_path, capsys):
    store = tmp_path / "h.jsonl"
    folder = history_rounds_folder(tmp_path / "c1", 1.0, seed=3)
    args = parsed("add", "--history", store, "--dir", folder, "--base", "main", "--new",
                  "merge", "--commit", "c1", "--label", "first")
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("added c1: rounds, ") and out.endswith(f" on its own ({folder})\n")
    (line,) = store.read_text().splitlines()
    assert json.loads(line)["commit"] == "c1" and json.loads(line)["label"] == "first"
    args = parsed("report", "--history", store, "--format", "json", "--html",
                  tmp_path / "drift.html")
    assert args.func(args) == 0  # without --gate, the drift never decides the exit code
    document = json.loads(capsys.readouterr().out)
    assert [p["commit"] for p in document["rows"][0]["points"]] == ["c1"]
    assert (tmp_path / "drift.html").read_text().startswith("<!DOCTYPE html>")
