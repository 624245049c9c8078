"""Tests of command_options.py: the argument types several commands share, the help
formatter, the options read from the registry of outputs, and the checks of --cost-per-hour
and --corpus against the runs."""

import argparse
import hashlib
from pathlib import Path

import pytest

from router_latency.errors import RouterLatencyError
from router_latency.formats import COMMAND_OUTPUTS
from router_latency.ladder import CostPerHour
from router_latency.command_options import (add_file_options, add_format_option,
                                            add_ladder_options, checked_costs, corpus_texts,
                                            cost_spec, HelpFormatter, non_negative_float,
                                            non_negative_int, positive_float, positive_int,
                                            real_number, side_name, whole_number)
from conftest import write_corpus


@pytest.mark.parametrize("parse, text, value", [
    (positive_float, "2.5", 2.5), (positive_float, ".5", 0.5), (positive_float, "1e3", 1000.0),
    (non_negative_float, "0", 0.0), (positive_int, "1", 1), (positive_int, " 7 ", 7),
    (non_negative_int, "0", 0), (whole_number(2, 5), "5", 5),
])
def test_a_number_option_reads_what_its_bound_allows(parse, text, value):
    assert parse(text) == value and type(parse(text)) is type(value)


@pytest.mark.parametrize("parse, text, message", [
    (positive_float, "x", "expected a number, got 'x'"),
    (positive_float, "0", "expected a number > 0, got '0'"),
    (positive_float, "inf", "expected a number > 0, got 'inf'"),
    (non_negative_float, "nan", "expected a number >= 0, got 'nan'"),
    (non_negative_float, "-1", "expected a number >= 0, got '-1'"),
    (positive_int, "0", "expected a whole number >= 1, got '0'"),
    (positive_int, "1.5", "expected a whole number >= 1, got '1.5'"),
    (positive_int, "-3", "expected a whole number >= 1, got '-3'"),
    (whole_number(2, 5, noun="a round"), "6", "expected a round from 2 to 5, got '6'"),
    (whole_number(2, 5), "1", "expected a whole number from 2 to 5, got '1'"),
])
def test_a_number_option_out_of_its_bound_is_one_message_quoting_it(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        parse(text)
    assert str(raised.value) == message


def test_real_number_makes_either_bound():
    assert real_number(positive=False)("0") == 0.0
    with pytest.raises(argparse.ArgumentTypeError):
        real_number(positive=True)("0")


@pytest.mark.parametrize("text", ["gpu", "cpu-2", "a.b_c", "R9"])
def test_a_side_is_a_name_that_stays_in_its_folder(text):
    assert side_name(text) == text


@pytest.mark.parametrize("text", ["", "-gpu", ".hidden", "a/b", "a..b", "gpu x", "é"])
def test_a_side_that_could_leave_the_folder_or_read_as_an_option_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        side_name(text)
    assert str(raised.value).endswith(f"got {text!r}")


@pytest.mark.parametrize("text, cost", [
    ("rocm=2.50", CostPerHour("rocm", 2.5, "node")),
    ("cpu=0.90/node", CostPerHour("cpu", 0.9, "node")),
    ("3.20/GPU", CostPerHour(None, 3.2, "GPU")),
    ("$4", CostPerHour(None, 4.0, "node")),
    ("gpu=.5 / GPU hour", CostPerHour("gpu", 0.5, "GPU hour")),
])
def test_a_cost_is_a_side_dollars_an_hour_and_per_what(text, cost):
    assert cost_spec(text) == cost


@pytest.mark.parametrize("text", ["0", "rocm=0", "rocm=", "rocm=-1", "a/b=1", "1/", "1/2GPU",
                                  "1e3", "=1", "gpu =1"])
def test_a_cost_that_is_not_usd_above_zero_for_a_side_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        cost_spec(text)
    assert str(raised.value).startswith("expected [SIDE=]USD[/UNIT]")


def test_costs_name_sides_measured_each_once():
    costs = (CostPerHour("cpu", 0.9, "node"), CostPerHour("gpu", 2.5, "GPU"))
    assert checked_costs(costs, ("cpu", "gpu")) == costs
    assert checked_costs([CostPerHour(None, 1.0, "node")], ("cpu", "gpu")) == \
        (CostPerHour(None, 1.0, "node"),)
    for wrong, message in (
            ([CostPerHour("tpu", 1.0, "node")], "tpu is not a side measured (cpu, gpu)"),
            ([costs[0], costs[0]], "a side priced twice"),
            ([CostPerHour(None, 1.0, "node"), costs[1]], "a side priced twice")):
        with pytest.raises(RouterLatencyError) as raised:
            checked_costs(wrong, ("cpu", "gpu"))
        assert str(raised.value) == f"{message} (--cost-per-hour)"


def test_the_corpus_of_the_runs_gives_each_prompts_text(tmp_path):
    path = write_corpus(tmp_path / "corpus.json", ["hello", "what is 2 + 2?"])
    sha256 = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    assert corpus_texts(path, sha256) == {0: "hello", 1: "what is 2 + 2?"}
    with pytest.raises(RouterLatencyError) as raised:
        corpus_texts(path, "b" * 64)
    assert str(raised.value) == f"not the corpus of the runs (sha256 {sha256[:12]}, the runs " \
                                f"used bbbbbbbbbbbb) ({path})"


def parser_with(*adders):
    parser = argparse.ArgumentParser(prog="x", formatter_class=HelpFormatter)
    for add in adders:
        add(parser)
    return parser


def test_format_and_file_options_come_from_the_commands_registry_entry():
    parser = parser_with(lambda p: add_format_option(p, "rounds"),
                         lambda p: add_file_options(p, "rounds"))
    formats = COMMAND_OUTPUTS["rounds"].formats
    assert parser.parse_args([]).format == "text"
    assert parser.parse_args(["--format", list(formats)[-1]]).format == list(formats)[-1]
    with pytest.raises(SystemExit):
        parser.parse_args(["--format", "yaml"])
    for name in COMMAND_OUTPUTS["rounds"].files:
        assert getattr(parser.parse_args([f"--{name}", "out"]), name.replace("-", "_")) == "out"


def test_the_help_shows_a_default_only_where_there_is_one(capsys):
    parser = parser_with(add_ladder_options, lambda p: p.add_argument("--n", type=int, default=3,
                                                                       help="count"))
    assert parser.parse_args([]).cost_per_hour == []
    assert parser.parse_args(["--cost-per-hour", "cpu=1", "--cost-per-hour", "2/GPU"]) \
        .cost_per_hour == [CostPerHour("cpu", 1.0, "node"), CostPerHour(None, 2.0, "GPU")]
    text = " ".join(parser.format_help().split())
    assert "count (default: 3)" in text
    assert "(default: None)" not in text and "(default: [])" not in text
