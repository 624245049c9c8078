"""Tests of errors.py: the one error type, the Notice record and the checks of values read
from files."""

import math

import pytest

from router_latency.constants import MAX_FILE_NUMBER, MAX_LATENCY_MS
from router_latency.errors import (checked_number, checked_object, checked_text, is_whole,
                                   Notice, RouterLatencyError, SignalInterrupt)


def test_an_error_names_where_it_was_found_in_parentheses():
    error = RouterLatencyError("expected a string", "r1.json: label")
    assert str(error) == "expected a string (r1.json: label)"
    assert str(RouterLatencyError("no rounds")) == "no rounds"
    assert isinstance(error, ValueError) and error.where == "r1.json: label"


def test_a_signal_interrupt_is_an_interrupt_that_keeps_its_signal():
    interrupt = SignalInterrupt(15)
    assert isinstance(interrupt, KeyboardInterrupt) and interrupt.signum == 15


def test_a_notice_is_its_kind_and_its_line():
    notice = Notice("floor", "warning: below the floor")
    assert notice.kind == "floor" and notice.text == "warning: below the floor"
    assert notice == ("floor", "warning: below the floor")


@pytest.mark.parametrize("value, minimum, whole", [
    (0, 0, True), (3, 1, True), (MAX_FILE_NUMBER, 0, True),
    (0, 1, False), (-1, 0, False), (MAX_FILE_NUMBER + 1, 0, False),
    (True, 0, False), (False, 0, False),  # a bool is an int to Python, never a count here
    (1.0, 0, False), ("1", 0, False), (None, 0, False),
])
def test_a_whole_number_is_an_int_within_the_files_bounds(value, minimum, whole):
    assert is_whole(value, minimum) is whole


@pytest.mark.parametrize("value, options", [
    (0, {}), (2.5, {}), (MAX_FILE_NUMBER, {}), (1e-9, {"positive": True}),
    (MAX_LATENCY_MS, {"maximum": MAX_LATENCY_MS}),
])
def test_a_finite_number_in_bounds_is_returned_as_it_is(value, options):
    assert checked_number(value, "f: x", **options) is value


@pytest.mark.parametrize("value, options, message", [
    (None, {}, "expected a finite number"),
    (True, {}, "expected a finite number"),
    ("1", {}, "expected a finite number"),
    (math.inf, {}, "expected a finite number"),
    (math.nan, {}, "expected a finite number"),
    (-0.5, {}, "expected a number >= 0"),
    (0, {"positive": True}, "expected a positive number"),
    (-1, {"positive": True}, "expected a positive number"),
    (MAX_FILE_NUMBER + 2, {}, "expected at most 9,007,199,254,740,992 (2^53)"),
    (MAX_LATENCY_MS + 1, {"maximum": MAX_LATENCY_MS}, "expected at most 86,400,000 ms (a day)"),
])
def test_a_number_out_of_bounds_is_refused_naming_the_field(value, options, message):
    with pytest.raises(RouterLatencyError) as raised:
        checked_number(value, "r1.json: passes[0].p50", **options)
    assert str(raised.value) == f"{message} (r1.json: passes[0].p50)"


def test_null_is_a_number_only_where_the_field_may_be_null():
    assert checked_number(None, "f: x", nullable=True) is None
    with pytest.raises(RouterLatencyError):
        checked_number(None, "f: x")


def test_an_object_field_is_returned_and_an_absent_or_null_one_is_empty():
    assert checked_object({"a": {"b": 1}}, "a", "f: ") == {"b": 1}
    assert checked_object({}, "a", "f: ") == {} and checked_object({"a": None}, "a", "f: ") == {}


@pytest.mark.parametrize("where, named", [
    ("r1.json: ", "r1.json: settings"),  # a top-level field: "file: key"
    ("r1.json: run", "r1.json: run.settings"),  # a nested one: "file: outer.key"
])
def test_an_object_field_that_is_not_one_is_refused_naming_its_path(where, named):
    with pytest.raises(RouterLatencyError) as raised:
        checked_object({"settings": [1]}, "settings", where)
    assert str(raised.value) == f"expected an object ({named})"


def test_a_text_field_is_a_string_or_null():
    assert checked_text({"label": "gpu"}, "label", "f") == "gpu"
    assert checked_text({}, "label", "f") is None
    assert checked_text({"label": None}, "label", "f") is None
    with pytest.raises(RouterLatencyError) as raised:
        checked_text({"label": 3}, "label", "r1.json: run")
    assert str(raised.value) == "expected a string or null (r1.json: run.label)"
