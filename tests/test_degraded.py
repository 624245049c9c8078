"""Degraded answers: a 200 that skipped a signal (signal_errors, applied_unknown_policies) or
whose decision failed (decision_error) is read from the body whatever the decision's fast
reading skips, kept in the run file, left out of the percentiles, counted against
--max-errors, and fails the gate when the new side degrades more than its base."""

import json
import re
import types
from pathlib import Path

import pytest

from router_latency.constants import DEFAULT_DECISION_PATHS, MAX_SIGNALS
from router_latency.errors import RouterLatencyError
from router_latency.files import write_atomic
from router_latency.degraded import (degraded_answers_line, degraded_counts, degraded_from_json,
                                     degraded_text, degraded_to_json, unknown_answers)
from router_latency.requests import pass_summary, Request
from router_latency.runfile import Attempt, dump_run, load_run, PassRecord, RunFile, RunSettings
from router_latency.client import http_response, ResponseReader
from router_latency.meaning import degraded_of, SignalTable
from router_latency.captures import DEFAULT_METRIC_PATTERN
from router_latency.answers import AnswerBook
from router_latency.simulator import (simulated_answer, SimulatedAnswers, SkippedSignals,
                                      with_signal_errors)
from router_latency.rounds import run_outcome
from conftest import make_run, write_corpus

# its rounds write 6 run files a test, only to read them back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


PASS_HEADERS = ()


FAILED = {"classifier:intent": "classifier_evaluation_failed"}


def go_answer(decision="math", **members):
    """A router answer as Go writes it: compact, its members in EvalResponse's order, the
    degraded ones after the ~2 KB of metrics where the decision's reading stops."""
    answer = simulated_answer("What is 2+2?", {}, decision, 3.0, "ab" * 32, False)
    hashed = answer.pop("config_hash")
    answer.update(members)
    answer["config_hash"] = hashed
    return json.dumps(answer, separators=(",", ":")).encode() + b"\n"


def test_a_plain_answer_is_not_degraded_and_costs_no_second_decoding():
    assert degraded_of(go_answer()) == ()
    # a prompt that mentions the names in its text is no member of the answer
    assert degraded_of(json.dumps({"original_text": 'say "signal_errors" please',
                                   "decision_result": {"decision_name": "x"}}).encode()) == ()


@pytest.mark.parametrize("members, expected", [
    ({"signal_errors": FAILED},
     (("signal_errors", "classifier:intent", "classifier_evaluation_failed"),)),
    ({"applied_unknown_policies": {"pii:tool": "no_match"}},
     (("applied_unknown_policies", "pii:tool", "no_match"),)),
    ({"decision_error": "decision unresolved"},
     (("decision_error", "", "decision unresolved"),)),
    ({"signal_errors": {}, "applied_unknown_policies": {}, "decision_error": ""}, ()),
    # newer routers: whether the failed signal's policy counted it as a match (was not read)
    ({"signal_error_matches": {"jailbreak:guard": True, "classifier:zero": False}},
     (("signal_error_matches", "classifier:zero", "false"),
      ("signal_error_matches", "jailbreak:guard", "true"))),
    ({"signal_error_matches": {}}, ()),
])
def test_each_member_makes_an_answer_degraded_only_when_it_holds_something(members, expected):
    assert degraded_of(go_answer(**members)) == expected


def test_a_member_named_by_escapes_is_found_as_json_reads_it():
    body = go_answer().replace(b'"config_hash"',
                               b'"signal\\u005ferrors":{"domain:x":"timeout"},"config_hash"')
    assert json.loads(body)["signal_errors"] == {"domain:x": "timeout"}
    assert degraded_of(body) == (("signal_errors", "domain:x", "timeout"),)


def test_what_is_kept_is_bounded_and_scrubbed():
    many = {f"classifier:c{i:03d}": "x" * 500 + " tok3n" for i in range(MAX_SIGNALS + 8)}
    found = degraded_of(go_answer(signal_errors=many), ("tok3n",))
    assert len(found) == MAX_SIGNALS and all(len(reason) <= 160 for _, _, reason in found)
    secret = degraded_of(go_answer(decision_error="token tok3n refused"), ("tok3n",))
    assert secret == (("decision_error", "", "token [hidden] refused"),)


def test_a_body_that_names_a_member_but_is_no_json_cannot_be_read():
    assert degraded_of(b'{"decision_result":{"decision_name":"x"},"signal_errors":{') is None


@pytest.mark.parametrize("signals", [False, True], ids=["no-signals", "signals"])
def test_the_book_reads_them_past_the_decisions_fast_path(signals):
    # a body over the book's cache and the whole-decode limit: the decision is read from
    # its leading members only, and the degraded members stand after the metrics
    body = go_answer(signal_errors=FAILED, applied_unknown_policies={"classifier:intent":
                                                                     "no_match"})
    assert len(body) > AnswerBook.CACHED_BODY_BYTES
    sent = types.SimpleNamespace(index=0, scheduled=1, started=2, retried=False, head_at=0)
    book = AnswerBook(DEFAULT_DECISION_PATHS, SignalTable() if signals else None, ())
    book.start_hold()
    for payload in (body, body[:200] + b" " * 900 + body[200:]):  # large, then cached small
        reader = ResponseReader(PASS_HEADERS)
        assert reader.feed(http_response(200, payload))
        book.record(sent, reader, 3)
    book.end_hold()
    book.settle()
    for result in book.results:
        assert result.error is None and result.decision.startswith("math")
        assert result.degraded == (
            ("signal_errors", "classifier:intent", "classifier_evaluation_failed"),
            ("applied_unknown_policies", "classifier:intent", "no_match"))
    broken = body.replace(b'"config_hash"', b'"config_hash":}')  # no JSON past the decision
    reader = ResponseReader(PASS_HEADERS)
    assert reader.feed(http_response(200, broken))
    book.record(sent, reader, 3)
    assert (book.results[-1].error, book.results[-1].degraded) == ("bad_json", ())


def degraded_requests(count=40, every=5):
    """Requests 0..count-1, every `every`-th one degraded and faster (1 ms, the rest 10)."""
    return tuple(Request(i, float(i), 1.0 if i % every == 0 else 10.0 + i / 100, 200, "d", None,
                         degraded=(("signal_errors", "classifier:intent", "timeout"),)
                         if i % every == 0 else ())
                 for i in range(count))


def run_file(path, requests, label="new"):
    attempt = Attempt(None, None, "", None, {}, None, {}, pass_summary(requests, 1.0),
                      requests)
    run = RunFile(label, True, {"path": "c.json", "sha256": "a" * 64, "count": 40},
                  (PassRecord("sequential", 1, False, False, attempt),),
                  settings=RunSettings())
    write_atomic(str(path), dump_run(run))
    return str(path)


def test_degraded_answers_are_counted_apart_and_left_out_of_the_percentiles():
    requests = degraded_requests()
    summary = pass_summary(requests, 1.0)
    assert (summary.requests, summary.ok, summary.errors, summary.degraded) == (40, 32, {}, 8)
    assert summary.degraded_signals == {"classifier:intent": {"timeout": 8}}
    assert summary.min_ms > 10  # the 1 ms answers that skipped a signal are not in it
    assert summary.req_per_s == 32.0


def test_a_run_with_degraded_answers_is_run_2_and_reads_back_as_written(tmp_path):
    path = run_file(tmp_path / "new.json", degraded_requests())
    text = Path(path).read_text()
    assert '"schema": "router-latency/run/2"' in text
    assert '"degraded": {"signal_errors": {"classifier:intent": "timeout"}}' in text
    run = load_run(path)
    assert run.passes[0].summary.degraded == 8
    assert run.passes[0].requests[0].degraded == (("signal_errors", "classifier:intent",
                                                   "timeout"),)
    again = tmp_path / "again.json"
    write_atomic(str(again), dump_run(run))
    assert again.read_bytes() == Path(path).read_bytes()
    # a run without one stays run/1, as every older file, and reads as before
    plain = Path(make_run(tmp_path / "plain.json"))
    assert '"schema": "router-latency/run/1"' in plain.read_text()
    assert load_run(str(plain)).passes[0].summary.degraded == 0


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["passes"][0]["summary"].update(degraded=7), "summary"),
    (lambda d: d["passes"][0]["summary"]["degraded_signals"]["classifier:intent"].update(
        timeout=9), "degraded_signals"),
    (lambda d: d["passes"][0]["requests"][0].update(error="timeout", decision=None),
     "requests[0].degraded"),
    (lambda d: d["passes"][0]["requests"][0]["degraded"].update(other={}),
     "requests[0].degraded"),
    (lambda d: d["passes"][0]["requests"][0]["degraded"].update(decision_error=3),
     "requests[0].degraded.decision_error"),
])
def test_a_file_whose_degraded_counts_do_not_hold_is_refused(tmp_path, cli, edit, field):
    path = Path(run_file(tmp_path / "new.json", degraded_requests()))
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))
    result = cli("compare", path, path)
    assert result.code == 2 and field in result.err and "Traceback" not in result.err


def test_the_members_are_written_as_the_router_sent_them():
    members = {"signal_errors": {"a:b": "x", "c:d": "y"}, "decision_error": "z"}
    kept = degraded_from_json(members, "r")
    assert degraded_to_json(kept) == members
    assert degraded_counts([kept, kept[:1]]) == {"a:b": {"x": 2}, "c:d": {"y": 1},
                                                 "decision": {"z": 1}}
    with pytest.raises(RouterLatencyError, match="at least one member"):
        degraded_from_json({}, "r")


def test_degraded_answers_count_against_max_errors_unless_allowed(tmp_path):
    run = load_run(run_file(tmp_path / "new.json", degraded_requests()))
    assert run_outcome(run, 0) == (1, "8 answers degraded (--max-errors 0; --allow-degraded "
                                      "does not count them)")
    assert run_outcome(run, 8) == (0, "")
    assert run_outcome(run, 0, allow_degraded=True) == (0, "")


def test_the_routers_unknown_answers_are_kept_by_default_and_are_no_fault(tmp_path):
    name = "vsr_model_runtime_unknown_answers_total"
    assert re.search(DEFAULT_METRIC_PATTERN, name)
    deltas = {f'{name}{{deployment="a",reason="timeout"}}': 5.0,
              f'{name}{{deployment="b",reason="timeout"}}': 2.0,
              "vsr_model_runtime_restarts_total": 0.0}
    assert unknown_answers(deltas) == {"timeout": 7.0}
    run = load_run(make_run(tmp_path / "r.json", environment={"metrics": {"deltas": deltas}}))
    assert run.passes[0].environment.faults == 0.0


@pytest.mark.parametrize("series", [
    'vsr_model_runtime_result_cache_total{deployment="a",result="hit"}',
    'vllm_srun_result_cache_total{model="m",outcome="miss"}',
    'vllm_sr_runtime_result_cache_total{model="m",outcome="hit"}'])
def test_a_result_caches_lookups_are_no_fault(tmp_path, series):
    # the cache series are kept in every scrape (the cache finding reads them); a router with
    # its cache on looked up in every pass, and each of its rounds was left out as one with
    # "restarts or device faults"
    deltas = {series: 40.0, "vsr_model_runtime_restarts_total": 0.0}
    run = load_run(make_run(tmp_path / "r.json", environment={"metrics": {"deltas": deltas}}))
    assert run.passes[0].environment.faults == 0.0
    deltas["vsr_model_runtime_restarts_total"] = 1.0
    run = load_run(make_run(tmp_path / "s.json", environment={"metrics": {"deltas": deltas}}))
    assert run.passes[0].environment.faults == 1.0


def test_the_simulator_answers_a_stable_share_with_signal_errors_and_faster(simulator):
    router = simulator(delay_ms=10, answers=SimulatedAnswers(
        signal_errors=SkippedSignals(0.2, 0.3)))
    texts = [f"prompt {i}" for i in range(200)]
    skipped = [t for t in texts if router._skipped(t)]
    assert 25 <= len(skipped) <= 55  # about a fifth
    body = json.loads(go_answer())
    answer = with_signal_errors(dict(body), router.answers.signal_errors)
    assert list(answer)[-3:] == ["signal_errors", "applied_unknown_policies", "config_hash"]
    assert answer["signal_errors"] == FAILED
    assert degraded_of(json.dumps(answer).encode())


def rounds_against_a_degrading_simulator(tmp_path, cli, simulator, allow):
    # 12 prompts, 2 of which the new side degrades (chosen by prompt, alike in every round);
    # the result cache's timing check reads 10 or more
    texts = [f"question {i}: what does routing topic {i % 9} need?" for i in range(12)]
    corpus = write_corpus(tmp_path / "corpus.json", texts)
    # one request at a time (serial): the c4 pass's answers wait for three others, about 4x
    # a prompt's first (sequential) time, never under half of it, so timing finds no result
    # cache on either side by construction (concurrent, a loaded machine's slow sequential
    # pass once made r3-new 'detected' and rounds refused: "not measured alike: cache")
    base = simulator(delay_ms=2, serial=True)
    new = simulator(delay_ms=2, serial=True,
                    answers=SimulatedAnswers(signal_errors=SkippedSignals(0.2, 0.3)))
    folder = tmp_path / "rounds"
    folder.mkdir()
    codes = []
    for number in (1, 2, 3):
        for side, router in (("base", base), ("new", new)):
            result = cli("run", "--url", router.url, "--corpus", corpus, "--out",
                         folder / f"r{number}-{side}.json", "--label", side, "--warmup", "2",
                         "--concurrency", "1", "4", *(["--allow-degraded"] if allow else []))
            codes.append((side, result.code, result.err))
    return texts, new, folder, codes


def test_a_new_side_that_degrades_a_fifth_of_its_answers_does_not_pass(tmp_path, cli,
                                                                         simulator):
    texts, new, folder, codes = rounds_against_a_degrading_simulator(tmp_path, cli, simulator,
                                                                     allow=False)
    count = sum(new._skipped(t) for t in texts)
    assert count
    assert {(side, code) for side, code, _ in codes} == {("base", 0), ("new", 1)}
    assert all(f"{2 * count} answers degraded (--max-errors 0" in err
               for side, _, err in codes if side == "new")
    run = load_run(str(folder / "r1-new.json"))
    assert [p.summary.degraded for p in run.passes] == [count, count]
    result = cli("rounds", "--dir", folder, "--base", "base", "--new", "new")
    assert result.code == 1, result.out
    verdict = result.out.splitlines()[-1]
    assert verdict.startswith("verdict: FAIL")
    assert f"new degraded more answers than base in Sequential (r1 0/{count}, r2 0/{count}, " \
           f"r3 0/{count}; classifier:intent classifier_evaluation_failed {3 * count}" in verdict
    assert f"degraded r1 new: {2 * count} answers skipped a signal or a decision " \
           f"(classifier:intent classifier_evaluation_failed {2 * count}" in result.out
    document = json.loads(cli("rounds", "--dir", folder, "--base", "base", "--new", "new",
                              "--format", "json").out)
    assert document["degraded"][0]["rounds"][0] == {"round": 1, "base": 0, "new": count}
    assert document["status"] == "fail"


def test_allowed_degraded_answers_still_fail_the_gate(tmp_path, cli, simulator):
    _, _, folder, codes = rounds_against_a_degrading_simulator(tmp_path, cli, simulator,
                                                               allow=True)
    assert {code for _, code, _ in codes} == {0}, codes
    junit = tmp_path / "gate.xml"
    result = cli("rounds", "--dir", folder, "--base", "base", "--new", "new", "--junit", junit)
    assert result.code == 1, result.out + result.err
    xml = junit.read_text()
    assert 'name="Sequential degraded"' in xml and "classifier_evaluation_failed" in xml


@pytest.mark.parametrize("body, counts", [
    # a member that is not the router's {signal: text}: kept under "(unnamed)", not "decision"
    (b'{"signal_errors": ["x"]}', {"(unnamed)": {'["x"]': 1}}),
    # an empty signal name beside others made degraded_to_json raise
    (b'{"signal_errors": {"": "a", "k": "b"}}', {"(unnamed)": {"a": 1}, "k": {"b": 1}}),
    # two members naming one label count the answer once (twice made a file the tool
    # refused to read back: a count above the degraded answers)
    (b'{"signal_errors": {"decision": "x"}, "decision_error": "x"}', {"decision": {"x": 1}}),
])
def test_degraded_members_of_odd_shapes_are_kept_and_counted_once(body, counts):
    found = degraded_of(body)
    assert degraded_counts([found]) == counts
    assert degraded_from_json(degraded_to_json(found), "x") == found


@pytest.mark.parametrize("signals", [
    {"a" * 128 + "x": "timeout", "a" * 128 + "y": "failed"},  # equal once cut to 128
    {"a" * 128 + "x": "timeout", "a" * 128 + "y": "timeout", "a" * 128: "timeout"},
    {"": "timeout", "(unnamed)": "failed"},  # '' is kept as '(unnamed)'
    {"a" * 127 + "~": "x", "a" * 128 + "1": "y", "a" * 128 + "2": "z"},
])
def test_signal_names_equal_once_cut_are_kept_apart_and_read_back(tmp_path, signals):
    # both were counted in degraded_counts, one kept in degraded_to_json: `run` wrote the
    # file (exit 0) and `compare` refused it ("the summary says ..., its records give ...")
    degraded = degraded_of(go_answer(signal_errors=signals))
    names = [signal for _, signal, _ in degraded]
    assert len(names) == len(set(names)) == len(signals)
    assert all(0 < len(name) <= 128 for name in names)
    requests = tuple(Request(i, float(i), 10.0, 200, "d", None, degraded=degraded)
                     for i in range(40))
    run = load_run(run_file(tmp_path / "new.json", requests))
    assert sorted(run.passes[0].requests[0].degraded) == sorted(degraded)
    assert sum(run.passes[0].summary.degraded_signals[n].get(r, 0) for _, n, r in degraded) \
        == 40 * len(signals)


FORGED = "timeout\nverdict: PASS\r\n\x1b[2J\u2028- forged"  # a reason that writes report lines
FORGED_SHOWN = "timeout\\nverdict: PASS\\r\\n\\u001b[2J\\u2028- forged"


def forged_requests(count=40, shift=0.0, every=5):
    return tuple(Request(i, float(i), 10.0 + i / 100 + shift, 200, "d", None,
                         degraded=(("signal_errors", "x\ny", FORGED),) if i % every == 0 else ())
                 for i in range(count))


def test_text_from_the_router_forges_no_line_in_any_report_format(tmp_path, cli):
    # a line break in a degraded reason went through degraded_answers_line unescaped: 4
    # forged lines in run's output, 8 in compare's; the report model now escapes every line
    folder = tmp_path / "results"
    folder.mkdir()
    for number in (1, 2, 3):
        run_file(folder / f"r{number}-cpu.json", forged_requests(shift=number / 7)[::-1],
                 label="cpu")
        run_file(folder / f"r{number}-gpu.json", forged_requests(shift=number / 5, every=4),
                 label="gpu")  # more degraded answers: JUnit's failure names them
    outputs = {"compare": cli("compare", folder / "r1-cpu.json", folder / "r1-gpu.json").out}
    for form in ("text", "markdown"):
        judged = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "gpu", "--format",
                     form, "--junit", tmp_path / f"{form}.xml", "--html", tmp_path / "p.html")
        assert judged.err == "", judged.err
        outputs[form] = judged.out
    outputs["junit"] = (tmp_path / "text.xml").read_text()
    outputs["page"] = (tmp_path / "p.html").read_text()
    for name, text in outputs.items():
        assert "timeout" in text, name
        assert "\x1b" not in text and "\u2028" not in text, name
        lines = text.splitlines()
        assert all("timeout" in line for line in lines if "forged" in line), name
        assert not any(line.strip(" -*<>/li") in ("forged", "verdict: PASS\r")
                       for line in lines), name
    assert FORGED_SHOWN in outputs["compare"] and FORGED_SHOWN in outputs["text"]
    assert "x\\ny" in outputs["compare"]


def test_runs_summary_lines_hold_the_routers_text_on_one_line(tmp_path):
    from router_latency.summary import run_summary
    run = load_run(run_file(tmp_path / "new.json", forged_requests()))
    lines = [block for section in run_summary(run.passes) for block in section.blocks
             if isinstance(block, str)]
    assert any(FORGED_SHOWN in line for line in lines)
    assert all(line.isprintable() for line in lines)


def test_a_file_with_an_empty_degraded_member_beside_a_full_one_is_refused_naming_it():
    # the writer leaves an empty member out: one in a file was written by hand
    with pytest.raises(RouterLatencyError, match=r"\(r\.applied_unknown_policies\)$"):
        degraded_from_json({"signal_errors": {"a:b": "x"}, "applied_unknown_policies": {}}, "r")


def test_an_unknown_policy_applied_is_counted_as_the_policy_the_router_applied():
    found = degraded_of(go_answer(applied_unknown_policies={"pii:tool": "no_match"}))
    assert degraded_counts([found]) == {"pii:tool": {"on_unknown no_match": 1}}


def test_signal_error_matches_are_counted_as_the_policy_resolved_them():
    body = go_answer(signal_errors={"jailbreak:guard": "timeout"},
                     signal_error_matches={"jailbreak:guard": True})
    found = degraded_of(body)
    assert degraded_counts([found]) == {"jailbreak:guard": {"counted as a match": 1,
                                                            "timeout": 1}}
    assert degraded_from_json(degraded_to_json(found), "x") == found


def test_the_byte_search_finds_every_degraded_member():
    from router_latency.degraded import DEGRADED_MEMBERS
    from router_latency.meaning import _MARKS
    assert all(any(f'"{name}"'.encode().startswith(mark) for mark in _MARKS)
               for name in DEGRADED_MEMBERS)


def test_the_degraded_line_says_the_percentiles_leave_them_out():
    signals = {"classifier:intent": {"failed": 2}}
    line = degraded_answers_line("in Sequential", 2, signals)
    assert line.startswith("degraded in Sequential: 2 answers skipped a signal or a decision (")
    assert line.endswith("; left out of the percentiles")
    # a check's details (JUnit's degraded check) say the counts alone
    assert degraded_answers_line("in Sequential", 2, signals, percentiles=False) \
        + "; left out of the percentiles" == line


@pytest.mark.parametrize("count", [1, 3, 4, 5, 7])
def test_the_degraded_counts_line_names_the_first_four_and_counts_the_rest(count):
    signals = {f"classifier:s{i}": {"failed": 10 + i} for i in range(count)}
    named = [f"classifier:s{i} failed {10 + i}" for i in reversed(range(count))]  # most first
    text = degraded_text(signals)
    if count <= 4:
        assert text == ", ".join(named)
    else:
        assert text == ", ".join(named[:4]) + f", {count - 4} more"
