"""Tests of answers.py: what a pass notes of each request, each answer classified, scrubbed
of secrets, its per-signal times held and read after the pass (the AnswerBook), and why a
request failed (failure_of)."""

import types

import pytest

from router_latency.constants import DEFAULT_DECISION_PATHS, LATE_BODY_MS
from router_latency.client import http_response, RequestFailed, ResponseReader
from router_latency.meaning import body_config_hash, SignalTable
from router_latency.answers import AnswerBook, failure_of, RawResult
from router_latency.passloop import PASS_HEADERS
from conftest import not_one_document, preview_answer


@pytest.mark.parametrize("signals", [False, True], ids=["no-signals", "signals"])
def test_the_book_notes_an_answer_small_or_large_as_its_classify_says(signals):
    # record classifies an answer over CACHED_BODY_BYTES itself, written out, and looks a
    # small one up in its cache: either way it notes what _classify says of it, the secret
    # it quotes hidden, its times read and its config_hash the body's (no header carried one)
    secret = "tok3n"
    times = ',"metrics":{"domain":{"execution_time_ms":3.5,"confidence":0.9}}'
    answers = [(200, '{"decision_result":{"decision_name":"m-%s"}%s,"note":"%%s"}'
                % (secret, times)),
               (503, '{"error":{"code":"BAD_%s","message":"%%s"}}' % secret),
               (200, '{"decision_result":{"decision_name":""}%s,"note":"%%s"}' % times),
               # degraded: its members after the metrics, where the decision's read stops
               (200, '{"decision_result":{"decision_name":"d"}%s,"signal_errors":'
                '{"classifier:%s":"boom"},"note":"%%s"}' % (times, secret)),
               (200, '{"decision_result":{"decision_name":"ok"},"config_hash":"%s"}'
                % ("ab" * 32) + "%s")]
    sent = types.SimpleNamespace(index=7, scheduled=1, started=2, retried=True, head_at=0)
    for status, form in answers:
        for padding in ("", " " * AnswerBook.CACHED_BODY_BYTES):
            body = (form % padding).encode()
            book, again = (AnswerBook(DEFAULT_DECISION_PATHS,
                                      SignalTable() if signals else None, (secret,))
                           for _ in range(2))
            reader = ResponseReader(PASS_HEADERS)
            assert reader.feed(http_response(status, body))
            book.record(sent, reader, 3)
            answer = again._classify(status, body, True)
            assert book.results == [(7, 1, 2, 3, status, answer.decision, answer.error, True,
                                     answer.code, body_config_hash(body), None,
                                     answer.degraded, False, answer.signal_ms)]
            assert answer.degraded == ((("signal_errors", "classifier:[hidden]", "boom"),)
                                       if b"signal_errors" in body else ())
            assert secret not in repr(book.results) and (answer.signal_ms != ()) == (
                signals and b"metrics" in body), body
    assert book.results[0].decision == "ok" and book.results[0].config_hash == "ab" * 32


@pytest.mark.parametrize("name", list(not_one_document()))
def test_a_held_answer_that_is_not_one_json_document_is_bad_json_once_settled(name):
    # while the pass runs an answer is held, its decision read; after it, its rest is read
    book = AnswerBook(DEFAULT_DECISION_PATHS, SignalTable(), ())
    sent = types.SimpleNamespace(index=0, scheduled=1, started=2, retried=False, head_at=0)
    book.start_hold()
    for number, body in enumerate((preview_answer("a"), not_one_document()[name],
                                   preview_answer("b"))):
        reader = ResponseReader(PASS_HEADERS)
        assert reader.feed(http_response(200, body))
        sent.index = number
        book.record(sent, reader, 3)
    book.end_hold()
    book.settle()
    assert [(r.decision, r.error) for r in book.results] == [
        ("math|qwen3", None), (None, "bad_json"), ("math|qwen3", None)]
    assert book.results[1].signal_ms == () and len(book.results[2].signal_ms) == 9


SENT = types.SimpleNamespace(index=4, scheduled=10, started=11, retried=False, head_at=0)


def recorded(book, status, body, headers=b""):
    """Note an answer of this status and body in the book; return its RawResult."""
    reader = ResponseReader(PASS_HEADERS)
    response = http_response(status, body)
    if headers:
        response = response.replace(b"\r\n", b"\r\n" + headers, 1)
    assert reader.feed(response)
    book.record(SENT, reader, 20)
    return book.results[-1]


def test_a_routed_answer_is_noted_with_its_decision_and_the_requests_times():
    book = AnswerBook(DEFAULT_DECISION_PATHS, None, ())
    result = recorded(book, 200, b'{"decision_result": {"decision_name": "math"}}')
    assert result == RawResult(4, 10, 11, 20, 200, "math", None, False, None, None, None, (), False, ())


def test_a_small_answer_seen_before_is_looked_up_and_its_headers_hash_is_the_requests_own():
    book = AnswerBook(DEFAULT_DECISION_PATHS, None, ())
    body = b'{"decision_result": {"decision_name": "math"}}'
    first = recorded(book, 200, body, b"x-vsr-config-hash: " + b"a" * 64 + b"\r\n")
    second = recorded(book, 200, body)
    assert len(book.classified) == 1  # classified once
    assert first.config_hash == "a" * 64 and second.config_hash is None
    assert first._replace(config_hash=None) == second


def test_the_cache_of_small_answers_is_bounded():
    book = AnswerBook(DEFAULT_DECISION_PATHS, None, ())
    for n in range(AnswerBook.CACHED_ANSWERS + 1):
        recorded(book, 200, b'{"decision_result": {"decision_name": "d%d"}}' % n)
    assert len(book.classified) == 1  # full: cleared, then the last one noted
    assert [r.decision for r in book.results] == [f"d{n}" for n in
                                                  range(AnswerBook.CACHED_ANSWERS + 1)]


def test_a_secret_an_error_quotes_is_hidden_in_its_code_and_a_code_it_spoils_is_dropped():
    book = AnswerBook(DEFAULT_DECISION_PATHS, None, ("s3cret",))
    result = recorded(book, 429, b'{"error": {"code": "LIMIT_s3cret", "message": "x"}}')
    assert (result.error, result.code) == ("http_4xx", "LIMIT_hidden")
    result = recorded(book, 429, b'{"error": {"code": "s3cret", "message": "x"}}')
    assert result.code == "hidden"
    result = recorded(book, 200, b'{"decision_result": {"decision_name": "to s3cret"}}')
    assert result.decision == "to [hidden]"


def test_a_failed_request_is_noted_with_its_reason_scrubbed_and_cut():
    book = AnswerBook(DEFAULT_DECISION_PATHS, None, ("s3cret",))
    book.failed(SENT, "malformed", 30, 200, "bad byte after s3cret " + "x" * 400)
    book.failed(types.SimpleNamespace(index=5, scheduled=1, started=2, retried=True),
                "timeout", 31)
    malformed, timeout = book.results
    assert malformed.reason == ("bad byte after [hidden] " + "x" * 400)[:160]
    assert (malformed.error, malformed.status, malformed.decision) == ("malformed", 200, None)
    assert (timeout.number, timeout.error, timeout.retried, timeout.reason) == \
        (5, "timeout", True, None)


def test_without_a_signal_table_settling_reads_nothing():
    book = AnswerBook(DEFAULT_DECISION_PATHS, None, ())
    book.start_hold()
    recorded(book, 200, b'{"decision_result": {"decision_name": "math"}}')
    book.end_hold()
    book.settle()
    assert book.results[0].signal_ms == () and book.settle_cpu_s == 0.0


@pytest.mark.parametrize("exc, status, failure", [
    (RequestFailed("malformed", None, "no status line"), 200,
     ("malformed", 200, "no status line")),  # the head's status, where it gave none
    (RequestFailed("malformed", 502, "cut body"), 200, ("malformed", 502, "cut body")),
    (RequestFailed("reset", None, "closed"), 200, ("reset", None, None)),
    (RequestFailed("http_5xx", 503), None, ("http_5xx", 503, None)),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), 200,
     ("malformed", 200, "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in "
                        "position 0: invalid start byte")),
])
def test_a_failure_is_its_kind_its_status_and_a_malformed_answers_reason(exc, status, failure):
    assert failure_of(exc, status) == failure


def held_and_read_whole(bodies, signals, secrets=()):
    """Note each 200 body in a book that holds answers (the rest of each read after the pass,
    settle) and in one that reads each whole as it comes (no hold); return both books."""
    books = []
    for hold in (True, False):
        book = AnswerBook(DEFAULT_DECISION_PATHS, SignalTable() if signals else None, secrets)
        sent = types.SimpleNamespace(index=0, scheduled=1, started=2, retried=False,
                                     head_at=0)
        if hold:
            book.start_hold()
        for number, body in enumerate(bodies):
            reader = ResponseReader(PASS_HEADERS)
            assert reader.feed(http_response(200, body))
            sent.index = number
            book.record(sent, reader, 3)
        book.end_hold()
        books.append(book)
    return books


def sampled_answer(model="qwen3"):
    return preview_answer("s", selected_model=model, selection_provenance={
        "mode": "read_only_snapshot", "sampled": True, "state_dependent": False,
        "sampling_seed": 7})


def answers_of_every_kind():
    """Answers over the book's cache whose decision reads fast, of every kind the rest of
    which the pass leaves to settle: plain, degraded, sampled, default route, no decision,
    degraded but no JSON past the decision, and every way of not being one JSON document."""
    degraded = preview_answer("d", signal_errors={"fact_check:t0k": "timeout t0k"},
                              applied_unknown_policies={"pii:x": "no_match"})
    return [preview_answer("a"), degraded, sampled_answer(), sampled_answer("t0k-model"),
            preview_answer("r", decision_result={"decision_name": ""}, routing_decision=None),
            preview_answer("n", decision_result={"x": 1}, routing_decision=None),
            degraded.replace(b'"config_hash"', b'"config_hash":}'),
            *not_one_document().values(), preview_answer("z")]


@pytest.mark.parametrize("signals", [False, True], ids=["no-signals", "signals"])
def test_an_answer_held_is_read_after_the_pass_as_the_pass_would_have_read_it(signals):
    # the pass reads a held answer's decision alone; settle reads the rest (the one-JSON
    # check, the degraded members, a sampled selection, the times): what each result then
    # holds is what reading every answer whole as it came gives, secrets hidden alike
    # each as it is (under the cache's limit, classified by _classify) and made larger (by
    # record itself)
    kinds = answers_of_every_kind()
    bodies = kinds + [body + b" " * AnswerBook.CACHED_BODY_BYTES for body in kinds]
    held, whole = held_and_read_whole(bodies, signals, ("t0k",))
    # held in the pass: those whose decision is read before their metrics, at least
    assert all(type(raw.signal_ms) is list
               for raw in held.results[:4] + held.results[len(kinds):len(kinds) + 4])
    assert held.results[1].degraded == () and held.results[2].decision == "math|qwen3"
    held.settle()
    whole.settle()
    assert held.results == whole.results
    assert held.settle_cpu_s > 0 and whole.settle_cpu_s == 0.0
    assert held.signals is None or held.signals.names == whole.signals.names
    for results in (held.results[:len(kinds)], held.results[len(kinds):]):
        assert [(raw.decision, raw.error) for raw in results[:7]] == [
            ("math|qwen3", None), ("math|qwen3", None), ("math|~qwen3", None),
            ("math|~[hidden]-model", None), ("(none)|qwen3", None), (None, "no_decision"),
            (None, "bad_json")]
        assert results[1].degraded == (
            ("signal_errors", "fact_check:[hidden]", "timeout [hidden]"),
            ("applied_unknown_policies", "pii:x", "no_match"))
        assert {raw.error for raw in results[7:-1]} == {"bad_json"}  # not one document
        assert results[-1].error is None


@pytest.mark.parametrize("signals", [False, True], ids=["no-signals", "signals"])
def test_an_answer_of_two_json_documents_is_held_then_bad_json(signals):
    # in the pass its decision reads well: it is held; after the pass its rest is read and
    # found to be a second document, as Go's decoder finds it: bad_json, no times
    two = not_one_document()["two documents"]
    book, _ = held_and_read_whole([preview_answer("a"), two, preview_answer("b")], signals)
    assert [(r.decision, r.error, type(r.signal_ms)) for r in book.results] == [
        ("math|qwen3", None, list)] * 3
    book.settle()
    assert [(r.decision, r.error) for r in book.results] == [
        ("math|qwen3", None), (None, "bad_json"), ("math|qwen3", None)]
    assert book.results[1].signal_ms == () and book.results[0].signal_ms == (
        (1.25,) * 9 if signals else ())


def test_the_book_builds_each_result_with_its_fields_in_order():
    # record builds a RawResult by tuple.__new__, its fields by position: each where its
    # name says
    book = AnswerBook(DEFAULT_DECISION_PATHS, SignalTable(), ("tok",))
    sent = types.SimpleNamespace(index=9, scheduled=10, started=11, retried=True,
                                 head_at=12)
    body = preview_answer("x", signal_errors={"pii:a": "slow"})
    reader = ResponseReader(PASS_HEADERS)
    assert reader.feed(http_response(200, body))
    book.record(sent, reader, 12 + LATE_BODY_MS * 1_000_000)
    assert book.results == [RawResult(
        number=9, scheduled=10, started=11, ended=12 + LATE_BODY_MS * 1_000_000, status=200,
        decision="math|qwen3", error=None, retried=True, code=None, config_hash="0" * 64,
        reason=None, degraded=(("signal_errors", "pii:a", "slow"),), late_body=True,
        signal_ms=(1.25,) * 9)]


def test_a_held_answer_whose_rest_raises_what_nothing_foresaw_is_read_again(monkeypatch):
    # settle runs after the pass, outside the loop's guard: an exception there is the
    # answer's, read again as the loop's read takes it, never the pass's
    def broken(*_):
        raise KeyError("unforeseen")
    monkeypatch.setattr("router_latency.answers.past_decision", broken)
    bodies = [preview_answer("a"), preview_answer("d", signal_errors={"pii:x": "t"})]
    held, whole = held_and_read_whole(bodies, True)
    held.settle()
    whole.settle()
    assert held.results == whole.results and held.results[1].degraded == (
        ("signal_errors", "pii:x", "t"),)
