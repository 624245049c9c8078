"""Tests of meaning.py: what an answer means: decision, error, signal times, sampled,
degraded."""

import json

import pytest
from hypothesis import given, strategies as st

from router_latency.constants import DEFAULT_DECISION_PATHS
from router_latency.versions import sampled_models, without_sampled
from router_latency.client import RequestFailed
from router_latency.meaning import (answer_document, body_config_hash, BODY_CONFIG_HASH, classify,
                                    DECISION_CHARS, DECISION_CUT, decision_of, default_route,
                                    error_code, Hold, marked_sampled, past_decision,
                                    SignalTable)
from conftest import not_one_document, OK, preview_answer, SETTINGS


HASH_A, HASH_B = "a" * 64, "b" * 64


@pytest.mark.parametrize("body", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"decision_result": ' + b'{"a": ' * 70 + b"1" + b"}" * 71,
    b'{"decision_result": {"decision_name": "x", "d": ' + b"[" * 65 + b"]" * 65 + b"}}",
])
def test_an_answer_nested_too_deep_is_malformed(body):
    with pytest.raises(RequestFailed) as failure:
        classify(200, body, DEFAULT_DECISION_PATHS)
    assert failure.value.kind == "malformed" and "nested deeper than 64" in failure.value.detail
    assert error_code(body) is None  # a failed answer's code: none, not an exception


def test_an_answer_as_deep_as_the_limit_is_read():
    body = b'{"decision_result": {"decision_name": "x", "d": ' + b"[" * 62 + b"]" * 62 + b"}}"
    assert classify(200, body, DEFAULT_DECISION_PATHS) == ("x", None, None)


PATHS = DEFAULT_DECISION_PATHS


@pytest.mark.parametrize("body, decision", [
    # no decision matched: decision_name "" and no routing_decision (the default route)
    (b'{"original_text":"hi","decision_result":{"decision_name":"","algorithm":"",'
     b'"used_signals":{},"matched_signals":{},"unmatched_signals":{}},"metrics":{}}\n',
     "(none)"),
    (b'{"decision_result":{"decision_name":""},"selected_model":"qwen3"}', "(none)|qwen3"),
    (b'{"decision_result":{"decision_name":"","used_signals":null},"routing_decision":""}',
     "(none)"),
    (b'{"decision_result":{"decision_name":"math"},"routing_decision":"math"}', "math"),
])
def test_an_answer_with_no_decision_matched_is_routed(body, decision):
    assert classify(200, body, PATHS) == (decision, None, None)


@pytest.mark.parametrize("body", [
    b"", b"\n", b"   \r\n",  # an empty body
    # the classifier not loaded: the router's answer has no decision_result at all
    b'{"original_text":"hi","requested_model":"MoM","metrics":{"keyword":{"execution_time_ms"'
    b':0,"confidence":0}}}\n',
    b'{"decision_result":{}}',  # no decision_name at all
])
def test_an_answer_without_a_decision_result_is_no_decision(body):
    assert classify(200, body, PATHS)[:2] == (None, "no_decision")


def test_a_sampled_selection_is_marked_and_left_out_of_agreement():
    sampled = (b'{"original_text":"x","decision_result":{"decision_name":"math"},'
               b'"selected_model":"model-b","selection_provenance":{"mode":"sampled",'
               b'"state_dependent":false,"sampled":true,"sampling_seed":7},'
               b'"routing_decision":"math"}')
    assert classify(200, sampled, DEFAULT_DECISION_PATHS)[0] == "math|~model-b"
    stateful = sampled.replace(b'"state_dependent":false,"sampled":true',
                               b'"state_dependent":true,"sampled":false')
    assert classify(200, stateful, DEFAULT_DECISION_PATHS)[0] == "math|~model-b"
    plain = sampled.replace(b'"state_dependent":false,"sampled":true',
                            b'"state_dependent":false,"sampled":false')
    assert classify(200, plain, DEFAULT_DECISION_PATHS)[0] == "math|model-b"
    assert without_sampled("math|~model-b") == "math" and without_sampled("math|m") == "math|m"
    assert sampled_models("math|~model-b") == ["model-b"] and sampled_models(None) == []
    # only the selected model is marked, never the decision itself
    assert marked_sampled("model-b", {"selected_model": "model-b"}, sampled) == "model-b"


def test_a_selection_provenance_with_a_nested_object_is_read():
    body = (b'{"decision_result": {"decision_name": "math"}, "selected_model": "m", '
            b'"selection_provenance": {"sampled": true, "weights": {"m": 0.5}}}')
    assert marked_sampled("math|m", {"selected_model": "m"}, body) == "math|~m"


HASH_A, HASH_B = "3f0c" * 16, "0123456789abcdef" * 4


HASH_PIECES = ['"config_hash"', ":", " ", '"', HASH_A, HASH_B, HASH_A[:63], HASH_A.upper(),
               '"config_hash":"', '\\"config_hash\\"', '{"a":1}', ",", "x", "\n",
               f'"config_hash":"{HASH_A}"', f'"config_hash" :\t"{HASH_B}"']


@SETTINGS
@given(st.lists(st.sampled_from(HASH_PIECES), max_size=14))
def test_the_body_config_hash_is_the_first_match_of_its_pattern(pieces):
    # bodies of near misses and several hashes: each place the key stands is tried in turn
    body = "".join(pieces).encode()
    found = BODY_CONFIG_HASH.search(body)
    expected = found.group(1).decode() if found else None
    assert body_config_hash(body) == expected == body_config_hash(bytearray(body))
    answer = b'{"decision":"math","config_hash":"%s"}' % HASH_B.encode()
    assert body_config_hash(body + answer) == (expected or HASH_B)


# bodies as the router writes them (pkg/apiserver: writeErrorResponse's envelope; the preview's
# 503 that carries its partial answer with decision_error), and what is not a router's code
@pytest.mark.parametrize("body,code", [
    (b'{"error": {"code": "OVERLOADED", "message": "admission queue is full", '
     b'"timestamp": "2026-11-30T17:00:00Z"}}', "OVERLOADED"),
    (b'{"error":{"code":"INVALID_INPUT","message":"text cannot be empty"}}', "INVALID_INPUT"),
    (b'{"original_text": "x", "metrics": {}, "decision_error": "decision \\"math\\" could '
     b'not be resolved"}', "decision_error"),
    (b'{"original_text": "x", "decision_error": ""}', None),
    (b'{"error": "no such route"}', None),
    (b'{"error": {"code": "two words"}}', None),
    (b'{"error": {"code": 429}}', None),
    (b"404 page not found\n", None),
    (b"[1]", None),
    (b"\xff", None),
])
def test_error_code_of_a_failed_answer(body, code):
    assert error_code(body) == code


def test_a_decision_that_is_not_a_string_is_stored_as_compact_json_cut_to_size():
    assert decision_of({"decision": {"b": [1, 2], "a": "x"}}, ["decision"]) == \
        '{"a":"x","b":[1,2]}'
    cut = decision_of({"decision": {"k": ["v" * 100] * 100}}, ["decision"])
    assert cut == '{"k":["' + ("v" * 100 + '","') * 2 + "v" * 43 + "...[cut]"
    assert len(cut) == DECISION_CHARS + len(DECISION_CUT)


def test_the_decision_is_read_without_decoding_the_metrics_unless_asked():
    body = preview_answer()
    paths = DEFAULT_DECISION_PATHS
    assert answer_document(body, paths) == {
        "decision_result": {"decision_name": "math", "used_signals": {"keywords": ["m"]}},
        "selected_model": "qwen3"}
    with_metrics = answer_document(body, paths + ("metrics?",))
    assert with_metrics["metrics"]["pii"] == {"execution_time_ms": 1.25, "confidence": 0.5}
    assert classify(200, body, paths) == ("math|qwen3", None, None)


TRICKY = [
    preview_answer('"selected_model":"fake","decision_result":{"decision_name":"fake"}'),
    preview_answer('\\"selected_model\\":\\"x\\" and a backslash \\\\'),
    preview_answer("ünïcödé \u2028 and an emoji \U0001F600"),
    preview_answer(decision_result={"decision_name": ""}),  # no match: routing_decision
    preview_answer(decision_result={"decision_name": ""}, routing_decision=""),
    preview_answer(selected_model=None),
    preview_answer(selected_model={"name": "qwen3", "nested": {"selected_model": "no"}}),
    preview_answer(decision_result=["not", "an", "object"]),
    preview_answer(eval_trace=[{"decision": "other", "selected_model": "x"}] * 20),
    json.dumps(json.loads(preview_answer()), indent=2).encode(),  # spaces everywhere
    b"\xef\xbb\xbf" + preview_answer(),  # a byte order mark
    b"  \n" + preview_answer() + b"\n\n",
    b"[" + preview_answer() + b"]",
    preview_answer().decode().replace("selected_model", "selected_model_x").encode(),
]


SMALL = [OK, b' \n{"decision_result" : {"decision_name": "ok"}, "selected_model": "m"}\n',
         b"\xef\xbb\xbf" + OK, OK.decode().encode("utf-16"), b'["ok"]', b"null", b"",
         OK + b"x", OK[:-1], b'{"routing_decision": "\xed\xa0\x80"}', b'{"decision": 1e400}']


@pytest.mark.parametrize("body", TRICKY + SMALL)
@pytest.mark.parametrize("paths", [
    DEFAULT_DECISION_PATHS, ("routing_decision", "selected_model"),
    ("decision_result.used_signals.keywords", "metrics.pii.confidence?"), ("missing?",),
    ("selected_model.name|selected_model",), ("routing_decision", "config_hash?")])
def test_decisions_read_member_by_member_are_those_of_the_whole_document(body, paths):
    try:
        document = json.loads(body)
        expected = decision_of(document, paths) or default_route(document, paths)
    except ValueError:
        expected = None if not body.strip() else "bad_json"  # empty: not ready, no decision
    decision, error, _ = classify(200, body, paths)
    assert (decision if error != "bad_json" else "bad_json") == expected


def test_a_member_sent_twice_counts_once_read_the_first_time():
    """The one way reading member by member differs from a whole decode (which takes the last):
    no JSON encoder writes a member twice; Go's, from the router's structs, cannot."""
    body = preview_answer()[:-1] + b',"selected_model":"other"}'
    assert classify(200, body, DEFAULT_DECISION_PATHS)[0] == "math|qwen3"


def test_an_answer_with_spaces_is_read_member_by_member_as_a_compact_one():
    """Spaces before a comma or the closing brace (an encoder's indent) keep the answer read
    member by member: a member sent twice still counts the first time, as in a compact one."""
    body = preview_answer()[:-1] + b',"selected_model":"other"}'
    spaced = json.dumps(json.loads(preview_answer()), indent=2)[:-2] \
        + ' ,\n  "selected_model": "other"  \n}\n'
    assert classify(200, body, DEFAULT_DECISION_PATHS)[0] == "math|qwen3"
    assert classify(200, spaced.encode(), DEFAULT_DECISION_PATHS)[0] == "math|qwen3"


def test_a_name_spelled_by_escapes_is_read_where_it_stands():
    """Decoded whole, a prefix would take the last decision_result; read member by member, the
    escaped one settles the decision with the selected_model after it, as always."""
    tail = preview_answer().split(b'"routing_decision":', 1)[1]
    body = (b'{"original_text":"x","decision\\u005fresult":{"decision_name":"first"},'
            b'"selected_model":"q","decision_result":{"decision_name":"last"},'
            b'"routing_decision":' + tail)
    assert classify(200, body, DEFAULT_DECISION_PATHS)[0] == "first|q"
    spelled = preview_answer().replace(b'"selected_model"', b'"selected\\u005Fmodel"', 1)
    assert classify(200, spelled, DEFAULT_DECISION_PATHS)[0] == "math|qwen3"


@pytest.mark.parametrize("first", [
    b'"x\\q"', b'"a\nb"', b'"unterminated', b"12", b'{"a":1}', b'"\\ud800"'])
def test_an_answer_read_after_one_of_the_same_decision_is_judged_by_its_own_first_member(first):
    """The prefix past the first member is cached: an answer that shares it with one read
    before still has its first member (original_text) read and judged."""
    good = preview_answer("case 1")
    paths = ("decision_result.decision_name", "selected_model?")
    assert classify(200, good, paths) == ("math|qwen3", None, None)
    body = good.replace(b'"case 1"', first, 1)
    try:
        json.loads(body)
    except ValueError:
        assert classify(200, body, paths) == (None, "bad_json", None)
    else:
        assert classify(200, body, paths) == ("math|qwen3", None, None)
    for text in ("case 2", "ünïcödé \"quoted\" and\na newline"):
        assert classify(200, preview_answer(text), paths) == ("math|qwen3", None, None)


def test_answers_of_other_decisions_after_the_first_are_read_as_their_own():
    for name, model, expected in (("math", "qwen3", "math|qwen3"), ("code", "llama", "code|llama"),
                                  ("math", "llama", "math|llama"),
                                  ("", "qwen3", "math|qwen3")):  # routing_decision's
        for text in ("a", "b"):
            body = preview_answer(text, decision_result={"decision_name": name},
                                  selected_model=model)
            assert classify(200, body, DEFAULT_DECISION_PATHS)[0] == expected


@pytest.mark.parametrize("body", [
    preview_answer()[:300], preview_answer()[:-1], preview_answer().replace(b":", b";", 1),
    preview_answer().replace(b'"MoM"', b"'MoM'"), b"{" + b" " * 600, preview_answer() + b"x",
    preview_answer().replace(b"qwen3", b"qw\xffen3")])
def test_an_answer_malformed_before_its_decision_is_bad_json(body):
    assert classify(200, body, DEFAULT_DECISION_PATHS)[1] == "bad_json"


@pytest.mark.parametrize("name", list(not_one_document()))
@pytest.mark.parametrize("paths", [
    DEFAULT_DECISION_PATHS, ("routing_decision",), ("decision_result.decision_name",),
    ("routing_decision", "metrics.pii.confidence?")])
@pytest.mark.parametrize("signals", [False, True], ids=["no-signals", "signals"])
def test_an_answer_that_is_not_one_json_document_past_its_decision_is_bad_json(name, paths,
                                                                              signals):
    body = not_one_document()[name]
    with pytest.raises(ValueError):
        json.loads(body)
    table = SignalTable() if signals else None
    assert classify(200, body, paths, signals=table) == (None, "bad_json", None)
    assert table is None or table.last is None  # no times of an answer refused


@pytest.mark.parametrize("nested", [
    {"decision_result": {"decision_name": "math", "deep": json.loads("[" * 70 + "]" * 70)}},
    {"original_text": json.loads("[" * 64 + "]" * 64)},  # read on the way to the decision
    {"decision_result": {"decision_name": ""}, "routing_decision": "",  # read to the end
     "metrics": json.loads("[" * 64 + "]" * 64), "original_text": "x" * 400}])
def test_an_answer_nested_too_deep_where_it_is_read_is_malformed(nested):
    with pytest.raises(RequestFailed) as failure:
        classify(200, preview_answer(**nested), DEFAULT_DECISION_PATHS)
    assert failure.value.kind == "malformed"


def test_an_answer_nested_too_deep_only_past_its_decision_is_routed():
    """As the rest of what follows the decision, the depth there is not read."""
    body = preview_answer(signal_values=json.loads("[" * 70 + "]" * 70))
    assert classify(200, body, DEFAULT_DECISION_PATHS)[:2] == ("math|qwen3", None)
    with pytest.raises(RequestFailed):  # small: decoded whole, judged whole
        classify(200, b'{"decision": "a", "x": ' + b"[" * 70 + b"]" * 70 + b"}", ("decision",))


def test_what_a_held_answer_says_past_its_decision_is_read_after_the_pass():
    # classify with a Hold that has room reads the decision alone, unmarked, and holds the
    # answer; past_decision reads its degraded members and its sampled selection later
    sampled = preview_answer(selection_provenance={"mode": "read_only_snapshot",
                                                   "sampled": True, "sampling_seed": 7},
                             signal_errors={"pii:default": "timeout"})
    hold = Hold()
    hold.room = 10 * len(sampled)
    assert classify(200, sampled, DEFAULT_DECISION_PATHS, hold=hold) == ("math|qwen3", None,
                                                                         None)
    text, at = hold.last
    assert text == sampled.decode() and hold.room == 9 * len(sampled)
    assert past_decision(text, DEFAULT_DECISION_PATHS) == (
        (("signal_errors", "pii:default", "timeout"),), "math|~qwen3")
    # read whole at once, the same
    assert classify(200, sampled, DEFAULT_DECISION_PATHS)[0] == "math|~qwen3"
    assert past_decision(preview_answer().decode(), DEFAULT_DECISION_PATHS) == ((), None)
    broken = preview_answer(signal_errors={"pii:x": "t"}).replace(b'"config_hash"',
                                                                  b'"config_hash":}')
    assert past_decision(broken.decode(), DEFAULT_DECISION_PATHS) is None  # bad_json
    # no room: read whole, nothing held, and no answer after it held
    hold.room = len(sampled) - 1
    assert classify(200, sampled, DEFAULT_DECISION_PATHS, hold=hold)[0] == "math|~qwen3"
    assert hold.last is None and hold.room == 0
