"""One registry per choice of output: each command's table of formats and files feeds its
--format choices, the help and the dispatch; every entry renders what the command prints."""

import argparse
import json

import pytest

from router_latency.files import write_atomic
from router_latency.runfile import dump_run, load_run
from router_latency.gate import GateSettings
from router_latency.compare import compare_runs
from router_latency.rounds import find_round_files, judge_rounds
from router_latency.record import record_section
from router_latency.render_json import COMPARE_SCHEMA, ROUNDS_SCHEMA
from router_latency.formats import COMMAND_OUTPUTS, CompareView, RoundsView
from router_latency.command_options import cost_spec
from router_latency.cli import build_parser, FORMAT_FILES
from conftest import three_rounds, two_runs, write_corpus
from test_capacity import ladder_in_memory

# its files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


# command -> (its table of printed formats, its table of files)
TABLES = {command: (outputs.formats, outputs.files)
          for command, outputs in COMMAND_OUTPUTS.items()}


COMPARE_FORMATS, ROUNDS_FORMATS = TABLES["compare"][0], TABLES["rounds"][0]


ROUNDS_FILES, RECORD_FILES, RUN_FILES = (TABLES[c][1] for c in ("rounds", "record", "run"))


def subparser(command):
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[command]


def option(parser, name):
    return next((a for a in parser._actions if name in a.option_strings), None)


@pytest.mark.parametrize("command", sorted(TABLES))
def test_the_format_choices_are_the_keys_of_the_commands_table(command):
    formats, _ = TABLES[command]
    action = option(subparser(command), "--format")
    if not formats:
        assert action is None
        return
    assert tuple(action.choices) == tuple(formats) and action.default in formats
    for name, exporter in formats.items():
        assert f"{name} ({exporter.about})" in action.help


@pytest.mark.parametrize("command", sorted(TABLES))
def test_the_file_options_are_the_entries_of_the_commands_table(command):
    _, files = TABLES[command]
    parser = subparser(command)
    for name, exporter in files.items():
        action = option(parser, f"--{name}")
        assert action is not None and action.help == exporter.about and action.dest == name
    # no option that writes a report file outside the table: those are "also write" ones
    also = {o for a in parser._actions for o in a.option_strings
            if (a.help or "").startswith("also write")}
    assert also == {f"--{name}" for name in files if files[name].about.startswith("also")}


def test_every_command_with_a_format_or_a_report_file_has_its_registry_entry():
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, sub in action.choices.items():
        if option(sub, "--format") is not None or any(
                (a.help or "").startswith("also write") for a in sub._actions):
            assert command in COMMAND_OUTPUTS


def test_a_format_asked_for_that_is_a_file_names_the_option_of_its_table(cli, tmp_path):
    asked = {"junit": ("rounds", "junit"), "xml": ("rounds", "junit"),
             "html": ("rounds", "html"), "csv": ("run", "csv")}
    assert FORMAT_FILES == {name: (command, f"--{file} FILE")
                            for name, (command, file) in asked.items()}
    for name, (command, file) in asked.items():
        result = cli("compare", "a.json", "b.json", "--format", name)
        assert result.code == 2 and result.out == ""
        assert f"{name} is a file of its own: --{file} FILE of {command}" in result.err


def judged(folder):
    files = find_round_files(str(folder), "cpu", "gpu")
    runs = {n: {s: load_run(p) for s, p in sides.items()} for n, sides in files.items()}
    return judge_rounds(runs, "cpu", "gpu", GateSettings())


@pytest.mark.parametrize("per_round", [False, True])
def test_every_rounds_format_renders_what_rounds_prints(tmp_path, cli, per_round):
    three_rounds(tmp_path)
    report = judged(tmp_path)
    printed = {}
    for name, exporter in ROUNDS_FORMATS.items():
        result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                     "--format", name, *(["--per-round"] if per_round else []))
        lines = exporter.lines(report, RoundsView(per_round=per_round))
        assert result.code == report.exit_code and result.err == ""
        assert lines and result.out == "\n".join(lines) + "\n"
        printed[name] = result.out
    assert len(set(printed.values())) == len(printed)  # no entry renders another's output
    assert json.loads(printed["json"])["schema"] == ROUNDS_SCHEMA


def test_every_rounds_file_holds_what_its_entry_renders(tmp_path, cli):
    (tmp_path / "rounds").mkdir()
    three_rounds(tmp_path / "rounds")
    report = judged(tmp_path / "rounds")
    paths = {name: tmp_path / f"out.{name}" for name in ROUNDS_FILES}
    result = cli("rounds", "--dir", tmp_path / "rounds", "--base", "cpu", "--new", "gpu",
                 *[w for name, path in paths.items() for w in (f"--{name}", path)])
    assert result.code == report.exit_code and result.err == ""
    for name, exporter in ROUNDS_FILES.items():
        data = exporter.data(report)
        assert data and paths[name].read_bytes() == data
    assert len({p.read_bytes() for p in paths.values()}) == len(paths)


def ladder_files(folder):
    paths = []
    for label, top in (("cpu", 100.0), ("gpu", 400.0)):
        path = folder / f"{label}.json"
        write_atomic(str(path), dump_run(ladder_in_memory(label, 1, top)._replace(path="")))
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("ladders", [False, True])
def test_every_compare_format_renders_what_compare_prints(tmp_path, cli, ladders):
    a, b = ladder_files(tmp_path) if ladders else two_runs(tmp_path)
    runs = (load_run(a), load_run(b))
    report = compare_runs(*runs)
    options = ["--cost-per-hour", "cpu=0.90", "--cost-per-hour", "gpu=2.50/GPU"]
    view = CompareView(runs, None, tuple(cost_spec(o) for o in options[1::2]))
    printed = {}
    for name, exporter in COMPARE_FORMATS.items():
        result = cli("compare", a, b, "--format", name, *(options if ladders else []))
        lines = exporter.lines(report, view if ladders else CompareView(runs))
        assert result.code == report.exit_code and result.err == ""
        assert lines and result.out == "\n".join(lines) + "\n"
        printed[name] = result.out
    assert len(set(printed.values())) == len(printed)
    assert json.loads(printed["json"])["schema"] == COMPARE_SCHEMA
    # the text shows the ladders and what they cost, the others only the report
    assert ("cost per million requests, gpu/cpu" in printed["text"]) == ladders


def test_every_record_file_holds_what_its_entry_renders(tmp_path, cli):
    (tmp_path / "rounds").mkdir()
    three_rounds(tmp_path / "rounds")
    section = record_section("s", str(tmp_path / "rounds"), "cpu", "gpu", GateSettings())
    paths = {name: tmp_path / f"record.{name}" for name in RECORD_FILES}
    result = cli("record", "--section", f"s={tmp_path / 'rounds'}:cpu:gpu",
                 *[w for name, path in paths.items() for w in (f"--{name}", path)])
    assert result.code == section.report.exit_code and result.err == ""
    assert result.out.endswith(f"wrote {' and '.join(map(str, paths.values()))}\n")
    for name, exporter in RECORD_FILES.items():
        data = exporter.data([section])
        assert data and paths[name].read_bytes() == data


def test_every_run_file_holds_what_its_entry_renders(tmp_path, simulator, cli):
    router = simulator(delay_ms=0.0)
    corpus = write_corpus(tmp_path / "c.json", [f"prompt {i}" for i in range(6)])
    paths = {name: tmp_path / f"run.{name}" for name in RUN_FILES}
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", tmp_path / "r.json",
                 "--label", "x", "--concurrency", "1", "--warmup", "0", "--quiet",
                 "--max-load", "10000", "--gpu", "none",
                 *[w for name, path in paths.items() for w in (f"--{name}", path)])
    assert result.code == 0, result.err
    run = load_run(str(tmp_path / "r.json"))
    for name, exporter in RUN_FILES.items():
        data = exporter.data(run)
        assert data and paths[name].read_bytes() == data


@pytest.mark.parametrize("name", sorted(COMPARE_FORMATS))
def test_compare_checks_its_options_whatever_the_format(tmp_path, cli, name):
    # the view is built once for every format: a price of no side measured is an error in
    # each, not only where the text would show it
    a, b = two_runs(tmp_path)
    result = cli("compare", a, b, "--format", name, "--cost-per-hour", "tpu=1")
    assert result.code == 2 and result.out == ""
    assert "tpu is not a side measured (cpu, rocm) (--cost-per-hour)" in result.err
