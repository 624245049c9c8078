"""Where the time goes: per-signal times from the answers, the router's histograms scraped
around each pass, the parts' rows in rounds, and the decomposition beside the client's latency.

The exposition in tests/data/router-metrics-{before,after}.prom is what prometheus/client_golang
1.14 (Debian's golang-github-prometheus-client-golang-dev) writes for the router's own histogram
definitions: llm_signal_extraction_latency_seconds{signal_type} and
llm_decision_evaluation_latency_seconds with prometheus.DefBuckets
(src/semantic-router/pkg/observability/metrics/signal_decision_plugin_metrics.go),
vsr_model_runtime_request_duration_seconds{deployment,surface} and
vsr_model_runtime_server_seconds{deployment,surface,phase} with their buckets
(pkg/modelservice's metrics). No stored exposition scraped from a running router was found in its
source, tests or docs, so the text was produced by the same client library the router links,
observing 40 calls (before) and 60 more (after)."""

import json
import re
import threading
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import html5lib
import pytest
from hypothesis import given, strategies as st

from router_latency.constants import (CACHE_SERIES, DEFAULT_DECISION_PATHS, DEFAULT_HISTOGRAMS,
                                      MAX_SIGNALS)
from router_latency.prometheus import Histogram, histogram_deltas, parse_prometheus
from router_latency.requests import pass_summary, Request
from router_latency.runfile import Attempt, dump_run, load_run, PassRecord, RunFile
from router_latency.client import parse_endpoint
from router_latency.meaning import classify, decision_reading, HeldAnswer, SignalTable, top_members
from router_latency.answers import AnswerBook
from router_latency.passloop import encode_prompts, PassLoop, PassPlan, Target
from router_latency.simulator import SignalModel, start_simulator
from router_latency.attribution import (decomposition_text, HISTOGRAM_PARTS, part_values,
                                        pass_attribution, router_parts)
from router_latency.rounds import start_order
from router_latency.command_rounds import gate_list
from conftest import final_answer, once_a_session, run_main, SETTINGS, write_corpus


DATA = Path(__file__).parent / "data"


def scraped(name):
    return parse_prometheus((DATA / f"router-metrics-{name}.prom").read_text())


def test_the_router_histograms_are_kept_per_bucket_and_read_back_per_part():
    before, after = scraped("before"), scraped("after")
    deltas = histogram_deltas(before, after, DEFAULT_HISTOGRAMS)
    # per bucket, sum and count, as the difference of the two scrapes
    key = 'llm_signal_extraction_latency_seconds_bucket{le="0.01",signal_type="pii"}'
    assert deltas[key] == after[key] - before[key] == 44 - 20
    assert deltas['llm_signal_extraction_latency_seconds_count{signal_type="pii"}'] == 60
    assert all(k.split("{")[0].rsplit("_", 1)[0] in DEFAULT_HISTOGRAMS for k in deltas)
    # a name not asked for is not kept; one asked for with --histogram is
    assert not histogram_deltas(before, after, ("vllm_srun_queue_duration_seconds",))
    parts = {p.name: p for p in router_parts({"metrics": {"histograms": deltas}}, 60)}
    assert set(parts) == {"domain", "pii", "jailbreak", "decision", "runtime", "parse",
                          "tokenize", "queue", "forward", "post", "serialize"}
    pii = parts["pii"]
    total = (after['llm_signal_extraction_latency_seconds_sum{signal_type="pii"}']
             - before['llm_signal_extraction_latency_seconds_sum{signal_type="pii"}'])
    assert pii.observations == 60 and pii.mean_ms == round(1000 * total / 60, 4)
    assert pii.per_request_ms == pii.mean_ms  # one observation per request here
    # p50: rank 30 of 60; 24 lie at or below 10 ms, 42 at or below 25 ms: the (10, 25] ms
    # bucket holds ranks 25 to 42, and the interpolation gives 10 + 15 * (30 - 24) / 18 ms
    assert pii.p50_ms == round(10 + 15 * 6 / 18, 4)
    # all of domain lies in the router's lowest bucket, 0 to 5 ms: no percentile is made up
    assert parts["domain"].p50_ms is None and parts["domain"].mean_ms > 0
    assert parts["forward"].observations == 60


@pytest.mark.parametrize("buckets, q, expected", [
    (((0.1, 0.0), (0.2, 10.0), (float("inf"), 10.0)), 0.5, 0.15),
    (((0.1, 5.0), (0.2, 10.0), (float("inf"), 10.0)), 0.75, 0.15),
    (((0.1, 0.0), (0.2, 4.0), (float("inf"), 10.0)), 0.9, 0.2),  # +Inf: the top finite bound
])
def test_a_histogram_quantile_is_interpolated_within_its_bucket(buckets, q, expected):
    histogram = Histogram("x", (), buckets[-1][1], 1.0, buckets)
    assert histogram.quantile(q) == pytest.approx(expected)


def test_the_signal_table_keeps_names_in_order_and_skips_what_the_router_did_not_evaluate():
    table = SignalTable()
    first = table.times({"metrics": {"keyword": {"execution_time_ms": 0, "confidence": 0},
                                     "domain": {"execution_time_ms": 3.25, "confidence": 0.8},
                                     "pii": {"execution_time_ms": 5, "confidence": 0.9}}})
    assert (table.names, first) == (["domain", "pii"], (3.25, 5))
    second = table.times({"metrics": {"pii": {"execution_time_ms": 4.5},
                                      "bad name!": {"execution_time_ms": 1.0},
                                      "jailbreak": {"execution_time_ms": "2"},
                                      "fact_check": {"execution_time_ms": 1.125}}})
    assert (table.names, second) == (["domain", "pii", "fact_check"], (None, 4.5, 1.125))
    assert table.times({"metrics": []}) == table.times([1]) == ()
    many = SignalTable()
    many.times({"metrics": {f"s{i}": {"execution_time_ms": 1.0} for i in range(40)}})
    assert len(many.names) == MAX_SIGNALS


def test_the_simulator_reports_its_signals_in_answers_and_histograms(simulator, tmp_path, cli):
    router = simulator(delay_ms=0.0, signals=SignalModel((("domain", 1.0), ("pii", 2.0))))
    corpus = write_corpus(tmp_path / "c.json", [f"prompt {i}" for i in range(8)])
    result = cli("run", "--url", router.url, "--corpus", corpus, "-o", tmp_path / "r.json",
                 "--label", "x", "--warmup", "0", "-c", "1", "--metrics-url", router.metrics_url, "-q")
    assert result.code == 0, result.err
    run = load_run(str(tmp_path / "r.json"))
    assert run.signal_names == ("domain", "pii")
    times = [r.signal_ms for r in run.passes[0].requests]
    assert all(0.9 <= d <= 1.1 and 1.8 <= p <= 2.2 for d, p in times)
    attribution = pass_attribution(run, run.passes[0])
    # the histograms on /metrics carry the same times: their sum over the pass
    histograms = run.passes[0].attempt.environment["metrics"]["histograms"]
    assert histograms['llm_signal_extraction_latency_seconds_count{signal_type="pii"}'] == 8
    assert histograms['llm_signal_extraction_latency_seconds_sum{signal_type="pii"}'] == \
        pytest.approx(sum(p for _, p in times) / 1000, abs=1e-6)
    assert attribution.signals_ms == pytest.approx(sum(d + p for d, p in times) / 8, abs=1e-3)
    assert attribution.unexplained_ms > 0  # one after another, inside the client's latency
    # --no-signals records none
    cli("run", "--url", router.url, "--corpus", corpus, "-o", tmp_path / "n.json", "--label",
        "x", "--warmup", "0", "-c", "1", "--no-signals", "-q")
    plain = load_run(str(tmp_path / "n.json"))
    assert plain.signal_names == () and b"signal_ms" not in (tmp_path / "n.json").read_bytes()


@pytest.mark.parametrize("parallel, expected", [(False, 0.006), (True, 0.003)])
def test_signals_run_one_after_another_or_in_parallel(parallel, expected):
    model = SignalModel((("domain", 3.0), ("pii", 3.0)), parallel)
    assert model.wait_s((("domain", 3.0), ("pii", 3.0))) == pytest.approx(expected)


def one_pass_run(signal_ms, names):
    requests = tuple(Request(i, float(i), 20.0, 200, "d", None, signal_ms=signal_ms)
                     for i in range(3))
    attempt = Attempt(None, None, "", None, {}, None, {}, pass_summary(requests, 1.0),
                         requests)
    return RunFile("x", True, {"path": "c", "sha256": "0" * 64, "count": 3},
                      (PassRecord("sequential", 1, False, False, attempt),),
                      signal_names=names)


@pytest.mark.parametrize("signal_ms, names, message", [
    ((1.0, 2.0), ("pii",), "2 signal times, but 1 signal names"),
    ((1.0,), ("pii", "pii"), "distinct signal names"),
    ((1.0,), ("bad name",), "distinct signal names"),
    ((-1.0,), ("pii",), "expected a number >= 0"),
])
def test_a_run_file_whose_signal_times_do_not_fit_its_names_is_refused(tmp_path, cli,
                                                                       signal_ms, names,
                                                                       message):
    path = tmp_path / "r1-x.json"
    path.write_bytes(b"".join(dump_run(one_pass_run((1.0,), ("pii",)))))
    assert load_run(str(path)).passes[0].requests[0].signal_ms == (1.0,)
    path.write_bytes(b"".join(dump_run(one_pass_run(signal_ms, names))))
    result = cli("compare", path, path)
    assert result.code == 2 and message in result.err and "Traceback" not in result.err
    assert result.err.count("\n") == 1


def measure_rounds(where, new_pii_ms, *options, base_pii_ms=2.0, prompts=30):
    """Measure 3 rounds of `prompts` prompts a pass in where/rounds, base and new alternating
    who starts, on simulated routers whose signals are domain 1 ms, pii base_pii_ms (new:
    new_pii_ms) and guard 0.5 ms after a 2 ms delay."""
    corpus = write_corpus(where / "c.json", [f"question number {i}" for i in range(prompts)])
    folder = where / "rounds"
    folder.mkdir()
    for number in (1, 2, 3):
        for side in start_order(number, ["base", "new"]):
            pii = base_pii_ms if side == "base" else new_pii_ms
            router = start_simulator("127.0.0.1", 0, delay_ms=2.0, seed=number,
                                     signals=SignalModel((("domain", 1.0), ("pii", pii),
                                                          ("guard", 0.5))))
            try:
                result = run_main("run", "--url", router.url, "--corpus", corpus, "-o",
                                  folder / f"r{number}-{side}.json", "--label", side,
                                  "--warmup", "2", "-c", "1,4", "--metrics-url",
                                  router.metrics_url, "-q", *options)
            finally:
                router.stop()
            assert result.code == 0, result.err
    return folder


@pytest.fixture(scope="module")
def pii_slower(tmp_path_factory):
    """Three rounds in which pii alone got 65% slower (10 to 16.5 ms), measured once a session
    for the two tests that read them (and write nothing there). 6.5 ms a request, well above
    what a loaded machine moves the client's mean by (see below): a stall of S ms in a pass
    moves its time outside the signals by S / 20 ms a request, so 390 ms in one round take
    the mean of 3 rounds to pii's 6.5 ms (378 ms did with 30 prompts, pii 10 and 14.2 ms);
    the base side's 13.5 ms a request are as before (a sequential pass twice as slow as the
    next for most prompts reads as a result cache). 20 prompts: 0.7 s a round, 30 took 0.9."""
    return once_a_session(tmp_path_factory, "pii-slower", lambda where: measure_rounds(
        where, new_pii_ms=16.5, base_pii_ms=10.0, prompts=20)) / "rounds"


def test_rounds_names_the_one_signal_that_got_slower(pii_slower, tmp_path, cli):
    # pii alone 65% slower, by 6.5 ms a request: the signal times are the simulator's seeded
    # draws, but the time outside them is the client's, which a loaded machine moves by a
    # millisecond or two in a mean of 20 or 30 requests (it overtook a change of 0.8 ms);
    # "most of the change" holds while that stays below pii's 6.5 ms (a median of 3 rounds)
    folder = pii_slower
    # pii's 6.5 ms are about 45% of the client's 14.5 ms: a tolerance far beyond it keeps the
    # latency rows from failing, which this test is not about
    asked = ("rounds", "--dir", folder, "--base", "base", "--new", "new", "--tolerance", "100")
    result = cli(*asked, "--format", "json")
    report = json.loads(result.out)
    # the parts are advisory: pii, 65% slower, is no reason of the outcome, and the exit
    # code is the latency rows' (pass, or inconclusive where their p95 is noisy)
    assert result.code in (0, 3) and not any("signal:" in r for r in report["reasons"])
    assert [b["pass"] for b in report["breakdowns"]] == ["sequential", "c4"]
    for breakdown in report["breakdowns"]:
        rows = {r["metric"]: r for r in breakdown["rows"]}
        # one shape of a judged row: a part's row has every key of a latency row, and its pass
        assert all(list(r) == list(report["rows"][0]) and r["pass"] == breakdown["pass"]
                   and r["diff"]["confidence"] == 0.95 for r in rows.values())
        for stat in ("p50", "p95", "mean"):
            pii = rows[f"signal:pii:{stat}"]
            assert pii["diff"]["low"] > 0 and pii["speedup_high"] < 1  # excludes no change
            for other in ("domain", "guard"):
                row = rows[f"signal:{other}:{stat}"]
                assert row["diff"]["low"] <= 0 <= row["diff"]["high"]
        signals = [r["metric"] for r in breakdown["rows"] if r["metric"].startswith("signal:")]
        assert signals[0].startswith("signal:pii:")  # the signal that moved most comes first
        assert re.search(r"pii \+6\d\.\d%", breakdown["sentence"])  # 65% slower
        # the sentence names each signal's p95 and, of the rest, the mean, saying so
        assert re.search(r"outside the signals \(mean\) [-+]\d", breakdown["sentence"])
    # sequential, the client's mean moved by about what pii's did: most of the change
    assert re.search(r": pii \+6\d\.\d%", report["breakdowns"][0]["sentence"])
    assert "(most of the change)" in report["breakdowns"][0]["sentence"]
    text = cli(*asked).out
    assert "where the time goes" in text and "unexplained" in text
    assert "Sequential p95 " in text and "pii p95" in text
    # the parts' change column says what the latency table's does, in every format
    markdown = cli(*asked, "--format", "markdown").out
    for rendered in (text, markdown):
        heads = [line for line in rendered.splitlines() if re.match(r"\|? *part\b", line)]
        assert heads and all("change [95% CI]" in h and " vs " not in h for h in heads), heads
    # the report page: a panel per pass, well formed as XML and as HTML5
    page = tmp_path / "page.html"
    cli(*asked, "--html", page)
    html = page.read_text(encoding="utf-8")
    root = ElementTree.fromstring(html.split("\n", 1)[1])
    html5lib.HTMLParser(strict=True).parse(html)
    assert "<h2>Where the time goes</h2>" in html
    assert "new vs base" not in html and html.count(">change [95% CI]</th>") >= 2
    bars = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")
            if t.text and t.text.endswith("time per request")]
    assert bars == ["Sequential: time per request", "Conc 4: time per request"]
    # compare: the parts of each pass, the most moved first, and each side's decomposition
    compared = cli("compare", folder / "r1-base.json", folder / "r1-new.json").out
    table = compared.split("pass ", 1)[1]
    parts = [line.split()[0] for line in table.splitlines() if " ms " in line and "p50 ms"
             not in line and "p95 ms" not in line and "p99 ms" not in line]
    # of the signals, seeded draws, pii moved most; the time outside them is one round's of
    # the client, where one stall of 130 ms on a loaded machine moves a mean of 20 by 6.5 ms
    assert [part for part in parts if part != "outside"][0] == "pii" and "outside" in parts
    assert "Sequential, where the time goes: A: client mean " in compared
    assert "Conc 4, where the time goes: B: client mean " in compared
    # record: a sentence per pass naming the part that changed most, by the mean of the
    # rounds' differences, not their median: pii's 6.5 ms, which a stall of 390 ms in one pass
    # would give the time outside the signals (20 prompts with pii 4.2 ms apart lost it once
    # under -n 4 beside a second copy of these files)
    out = cli("record", "--section", f"x={folder}:base:new", "--json", tmp_path / "r.json",
              "--markdown", tmp_path / "r.md")
    assert out.code in (0, 1, 3), out.err  # the latency rows decide it, not the parts
    sentences = (tmp_path / "r.md").read_text()
    assert re.search(r"- Sequential: pii changed most, \+6\d\.\d%", sentences)
    assert "- Conc 4: " in sentences and "changed most" in sentences.split("- Conc 4: ")[1]


def test_a_gated_signal_row_fails_the_gate(pii_slower, cli):
    # the signal row alone is gated: the latency rows (about 45% slower here) decide nothing
    result = cli("rounds", "--dir", pii_slower, "--base", "base", "--new", "new", "--tolerance",
                 "25", "--gate", "signal:pii:p95")
    assert result.code == 1
    assert "Sequential signal:pii:p95 is worse than the tolerance" in result.out
    assert "pii p95*" in result.out


@pytest.mark.parametrize("text", ["signal:pii:p99", "router:forward", "signal::p95",
                                  "c4:signal:pii", "signal:pii:p95:x"])
def test_the_gate_refuses_a_part_row_it_does_not_know(text):
    with pytest.raises(Exception, match="signal:NAME:STAT"):
        gate_list(text)


def test_the_gate_accepts_part_rows_beside_the_latency_rows():
    assert gate_list("p95,signal:pii:p95,c16:router:forward:mean") == (
        "p95_ms", "signal:pii:p95", "c16:router:forward:mean")


@pytest.mark.parametrize("value", ["pii", "pii:x", "pii:-1", "pii:1,pii:2", "bad name:1",
                                   "pii:1,"])
def test_simulate_refuses_a_bad_signal_list(cli, value):
    from conftest import assert_one_line_error
    assert_one_line_error(cli("simulate", "--signals", value), "--signals", "NAME:MS")


@pytest.mark.parametrize("value", ["bad name", "1st", "a{b}"])
def test_run_refuses_a_bad_histogram_name(cli, tmp_path, value):
    from conftest import assert_one_line_error
    corpus = write_corpus(tmp_path / "c.json", ["a"])
    assert_one_line_error(cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "-o",
                              tmp_path / "r.json", "--label", "x", "--histogram", value),
                          "--histogram", "metric name")


@pytest.mark.parametrize("client, expected", [
    (10.0, "x: client mean 10.0 ms; signals summed 7.00 ms (domain 2.00, pii 5.00); "
           "unexplained 3.00 ms (wire, HTTP, admission, the router's other work); router "
           "histograms, mean per observation (may overlap the signals): forward 4.00 ms"),
    (5.5, "x: client mean 5.50 ms; signals summed 7.00 ms (domain 2.00, pii 5.00); the "
          "signals' sum exceeds it by 1.50 ms: they overlap (evaluated in parallel), so no sum "
          "is forced; router histograms, mean per observation (may overlap the signals): "
          "forward 4.00 ms"),
])
def test_the_decomposition_states_what_is_unexplained_and_never_forces_a_sum(client, expected):
    medians = {"signal:domain:mean": 2.0, "signal:domain:p95": 2.5, "signal:pii:mean": 5.0,
               "router:forward:mean": 4.0, "outside:mean": 3.0}
    assert decomposition_text("x", medians, client) == expected


def test_without_signal_times_the_time_outside_the_router_comes_from_its_histograms():
    deltas = histogram_deltas(scraped("before"), scraped("after"), DEFAULT_HISTOGRAMS)
    requests = tuple(Request(i, float(i), 20.0, 200, "d", None) for i in range(60))
    summary = pass_summary(requests, 1.0)
    attempt = Attempt(None, None, "", None, {}, None, {"metrics": {"histograms": deltas}},
                         summary, requests)
    run = RunFile("x", True, {"path": "c", "sha256": "0" * 64, "count": 60},
                     (PassRecord("sequential", 1, False, False, attempt),))
    found = pass_attribution(run, run.passes[0])
    parts = {p.name: p for p in found.parts}
    own = sum(parts[n].per_request_ms for n in ("domain", "pii", "jailbreak", "decision"))
    assert found.signals_ms is None and found.outside_p50_ms is None
    assert found.outside_mean_ms == round(20.0 - own, 4)
    text = decomposition_text("x", part_values(found), 20.0)
    assert "per pass from its histograms: " in text and "signals summed" not in text


def test_an_answer_read_for_its_signals_gives_the_decision_and_times_of_the_whole_answer():
    # the router's compact answer: every signal it knows, those it did not evaluate at 0; the
    # pass loop parses it with those entries replaced, which must change nothing it reads
    metrics = {name: {"execution_time_ms": ms, "confidence": 0.9 if ms else 0}
               for name, ms in (("keyword", 0), ("domain", 3.5), ("fact_check", 0),
                                ("pii", 5.25), ("kb", 0))}
    body = json.dumps({"original_text": 'say {"execution_time_ms":0,"confidence":0} please',
                       "decision_result": {"decision_name": "math"}, "metrics": metrics,
                       "selected_model": "m"}, separators=(",", ":")).encode()
    table = SignalTable()
    target = Target(parse_endpoint("http://127.0.0.1:9"), signals=table)
    loop = PassLoop(target, [b""], __import__("threading").Event(), PassPlan("x", 1))
    answer = loop.answers._classify(200, bytearray(body))
    assert answer[:3] == classify(200, body, DEFAULT_DECISION_PATHS)
    assert (table.names, answer.signal_ms) == (["domain", "pii"], (3.5, 5.25))


def test_without_the_answers_times_the_router_histograms_name_the_part(tmp_path, cli):
    # pii 2 ms, new 4.5 ms (+125%; both in the router's lowest bucket), from the histograms:
    # means of the simulator's seeded draws (10% jitter), 12 a pass, +120% at least in 3
    # rounds, while the latency rows (2.5 ms on about 6.5) stay inside a tolerance of 100%:
    # pii's row alone fails the gate. 2.8 ms (+40%) against 25% needed 30 prompts a pass (20
    # left Sequential's row undecided)
    folder = measure_rounds(tmp_path, 4.5, "--no-signals", prompts=12)
    asked = ("rounds", "--dir", folder, "--base", "base", "--new", "new", "--tolerance", "100")
    report = json.loads(cli(*asked, "--format", "json").out)
    for breakdown in report["breakdowns"]:
        rows = {r["metric"]: r for r in breakdown["rows"]}
        assert not any(m.startswith("signal:") for m in rows)
        # llm_signal_extraction_latency_seconds: means from _sum / _count; the router's
        # buckets (0 to 5 ms lowest) cannot place a percentile of 1 to 3 ms
        assert {"router:pii:mean", "router:domain:mean", "router:guard:mean"} <= set(rows)
        assert "router:pii:p95" not in rows
        assert rows["router:pii:mean"]["speedup_high"] < 1
        assert rows["router:domain:mean"]["speedup_low"] <= 1 <= rows["router:domain:mean"][
            "speedup_high"]
    gated = cli(*asked, "--gate", "p50,p95,req/s,router:pii:mean")
    assert gated.code == 1 and "Sequential router:pii:mean is worse than the tolerance" in gated.out


def test_a_signal_only_one_side_reports_is_said_not_dropped(simulator, tmp_path, cli):
    corpus = write_corpus(tmp_path / "c.json", [f"question number {i}" for i in range(12)])
    folder = tmp_path / "rounds"
    folder.mkdir()
    for number in (1, 2, 3):
        for side, signals in (("base", (("domain", 1.0), ("pii", 1.0))),
                              ("new", (("domain", 1.0),))):
            router = simulator(delay_ms=0.5, seed=number, signals=SignalModel(signals))
            assert cli("run", "--url", router.url, "--corpus", corpus, "-o",
                       folder / f"r{number}-{side}.json", "--label", side, "--warmup", "0",
                       "-c", "1", "-q").code == 0
            router.stop()
    report = json.loads(cli("rounds", "--dir", folder, "--base", "base", "--new", "new",
                            "--format", "json").out)
    (breakdown,) = report["breakdowns"]
    assert breakdown["sentence"].endswith("; pii reported by base only")
    assert not any(r["metric"].startswith("signal:pii:") for r in breakdown["rows"])


@pytest.mark.parametrize("value", ["12", -1.0, True, None])
def test_a_run_file_with_a_histogram_difference_that_is_no_count_is_refused(tmp_path, cli,
                                                                            value):
    run = one_pass_run((1.0,), ("pii",))
    item = run.passes[0]
    series = 'llm_signal_extraction_latency_seconds_count{signal_type="pii"}'
    attempt = item.attempt._replace(environment={"metrics": {"histograms": {series: value}}})
    path = tmp_path / "r1-x.json"
    path.write_bytes(b"".join(dump_run(run._replace(passes=(item._replace(
        attempt=attempt),)))))
    result = cli("compare", path, path)
    assert result.code == 2 and "metrics.histograms." in result.err
    assert result.err.count("\n") == 1


def test_the_demo_names_pii_as_the_signal_that_got_slower(demo_kept):
    result, _ = demo_kept  # demo --rounds 3 --keep, run once (conftest)
    assert result.code in (0, 3), result.err
    sentences = [line for line in result.out.splitlines() if " p95 " in line and ": " in line
                 and "pii " in line]
    assert [s.split(" p95 ")[0] for s in sentences] == ["Sequential", "Conc 4", "Conc 16"]
    for sentence in sentences:
        found = re.search(r"pii \+(\d+\.\d)% \[\+(\d+\.\d)%, \+(\d+\.\d)%\]", sentence)
        change, low, high = (float(v) for v in found.groups())
        assert 30 < change < 50 and 0 < low <= high  # 40% slower, the interval excludes 0
        assert "domain +0.0% [+0.0%, +0.0%]" in sentence


def signal_reading(paths=DEFAULT_DECISION_PATHS):
    """The names and plan the pass reads an answer's decision by, with its metrics."""
    return decision_reading(tuple(paths), ("metrics",))[:2]


def compact_answer(metrics_text: str) -> bytes:
    """A router answer over WHOLE_JSON_BYTES with the given text as its metrics member."""
    return ('{"original_text":"' + "x" * 600 + '","decision_result":{"decision_name":"math"},'
            '"selected_model":"qwen3","selection_status":"selected","routing_decision":"math",'
            f'"metrics":{metrics_text},"config_hash":"{"0" * 64}"}}\n').encode()


def metrics_text(entries) -> str:
    return json.dumps({name: {"execution_time_ms": ms, "confidence": c}
                       for name, ms, c in entries}, separators=(",", ":"))


def test_the_signal_times_are_read_by_a_scan_that_gives_what_decoding_gives():
    answers = [
        [("keyword", 0, 0), ("domain", 3.5, 0.9), ("pii", 5, 0.25), ("kb", 0, 0)],
        [("keyword", 1.25, 0.125), ("domain", 3.123456789, 0.5), ("pii", 0, 0), ("kb", 7, 1)],
        [("domain", 12, -0.5), ("pii", 0.00125, 0.1), ("jailbreak", 2.5, 0.3)],  # new name
        [("keyword", 0, 0), ("domain", 3.5, 0.9), ("pii", 5, 0.25), ("kb", 0, 0)],
        [], [("keyword", 0, 0)]]
    scanned, decoded = SignalTable(), SignalTable()
    for entries in answers:
        body = compact_answer(metrics_text(entries))
        text = body.decode()
        members, index = top_members(text, *signal_reading())
        assert "metrics" not in members
        found = scanned.scan(text, index)
        assert found is not None, entries  # read without decoding the answer
        assert found == decoded.times(json.loads(body)) and scanned.names == decoded.names
        assert [type(v) for v in found] == [type(v) for v in decoded.last or found]
        assert classify(200, body, DEFAULT_DECISION_PATHS, signals=scanned)[:2] == \
            ("math|qwen3", None) and scanned.last == found
    assert scanned.names == ["domain", "pii", "keyword", "kb", "jailbreak"]


GOOD_METRICS = '{"domain":{"execution_time_ms":3.5,"confidence":0.9},' \
               '"pii":{"execution_time_ms":5,"confidence":0.25}}'


@pytest.mark.parametrize("metrics", [
    GOOD_METRICS.replace("3.5", "3."), GOOD_METRICS.replace("3.5", "03.5"),
    GOOD_METRICS.replace("3.5", "3.5.1"), GOOD_METRICS.replace("0.25", "-"),
    GOOD_METRICS.replace("0.25", ""), GOOD_METRICS.replace("},", "}3,"),
    GOOD_METRICS.replace("},", "},3"), GOOD_METRICS.replace('{"domain"', '{3"domain"'),
    GOOD_METRICS.replace('"pii"', '"p3ii'), GOOD_METRICS.replace(",", "", 1),
    GOOD_METRICS.replace("}}", "}3}"), GOOD_METRICS.replace("0.9", "+0.9"),
    GOOD_METRICS.replace("3.5", "3.5e"), GOOD_METRICS.replace(":{", ":", 1),
    # a number's characters out of their place: in a key or a name, its own place empty
    GOOD_METRICS.replace('_ms":3.5', '_ms3.5":'),
    GOOD_METRICS.replace('"pii":{"execution_time_ms":5', '"p5ii":{"execution_time_ms":'),
    GOOD_METRICS.replace('":0.9}', '0.9":}')])
def test_an_answer_whose_metrics_are_malformed_is_bad_json_with_its_times_read(metrics):
    body = compact_answer(metrics)
    with pytest.raises(ValueError):
        json.loads(body)
    table = SignalTable()
    seen = compact_answer(GOOD_METRICS).decode()  # its form seen before: its skeleton known
    at = top_members(seen, *signal_reading())[1]
    # the first read adds the names (and forgets the skeletons), the second keeps its skeleton
    assert table.scan(seen, at) == table.scan(seen, at) == (3.5, 5) and len(table.forms) == 1
    assert classify(200, body, DEFAULT_DECISION_PATHS, signals=table)[1] == "bad_json"
    # without the times: one JSON document or none, wherever its decision stands (issue 33)
    assert classify(200, body, DEFAULT_DECISION_PATHS)[:2] == (None, "bad_json")


@pytest.mark.parametrize("metrics", [
    GOOD_METRICS.replace(":", " : "), GOOD_METRICS.replace('"pii"', '"p\\u0069i"'),
    GOOD_METRICS.replace("0.25}", '0.25,"extra":1}'), GOOD_METRICS.replace(":5,", ":-5,"),
    GOOD_METRICS.replace(":5,", ":5e400,"), GOOD_METRICS.replace("0.9", "9e-07"), GOOD_METRICS.replace('"pii"', '"pii2"')])
def test_metrics_in_another_form_are_decoded_and_read_as_before(metrics):
    body = compact_answer(metrics)
    table, decoded = SignalTable(), SignalTable()
    assert classify(200, body, DEFAULT_DECISION_PATHS, signals=table)[:2] == \
        ("math|qwen3", None)
    assert table.last == decoded.times(json.loads(body)) and table.names == decoded.names


@pytest.mark.parametrize("between", [
    '"recommended_models":["qwen3","llama-3.1-8b"],',  # the router's list before metrics
    '"selection":{"reason":"prefers [qwen3] {fast}","scores":[1,[2,3]]},',
    '"note":"a ] and a } in a string",',
    '"inner":{"metrics":{"domain":{"execution_time_ms":9,"confidence":1}}},'])  # not ',"metrics"'
def test_members_with_brackets_before_metrics_leave_the_times_to_the_scan(between):
    body = compact_answer(GOOD_METRICS).replace(b'"metrics":', between.encode() + b'"metrics":')
    text = body.decode()
    paths = ("decision_result.decision_name",)
    members, index = top_members(text, *signal_reading(paths))
    table = SignalTable()
    assert table.scan(text, index) == SignalTable().times(json.loads(body)) == (3.5, 5)


@pytest.mark.parametrize("between", [
    '"inner":{"a":1,"metrics":{"domain":{"execution_time_ms":9,"confidence":1}}},',
    '"inner":[{"b":2,"metrics":{"domain":{"execution_time_ms":9,"confidence":1}}}],'])
def test_a_metrics_member_nested_before_the_answers_own_is_not_taken_for_it(between):
    body = compact_answer(GOOD_METRICS).replace(b'"metrics":', between.encode() + b'"metrics":')
    text = body.decode()
    paths = ("decision_result.decision_name",)
    members, index = top_members(text, *signal_reading(paths))
    assert SignalTable().scan(text, index) is None  # decoded instead
    table = SignalTable()
    assert classify(200, body, paths, signals=table)[:2] == ("math", None)
    assert table.last == (3.5, 5)


def held_answers():
    """Answers over the small-answer cache's size, of every kind the scan meets: the compact
    form with names coming and going, malformed metrics, other forms, members before metrics."""
    def large(metrics, between=""):
        body = compact_answer(metrics).replace(b'"x', b'"' + b"y" * 900 + b"x")
        return body.replace(b'"metrics":', between.encode() + b'"metrics":')
    good = [large(metrics_text(entries)) for entries in (
        [("keyword", 0, 0), ("domain", 3.5, 0.9), ("pii", 5, 0.25)],
        [("keyword", 1.25, 0.5), ("domain", 2, 0.5), ("pii", 0, 0), ("kb", 7, 1)],
        [("jailbreak", 2.5, 0.3), ("domain", 12, 0.1)])]
    malformed = [large(GOOD_METRICS.replace(old, new)) for old, new in (
        ("3.5", "3.5.1"), ("0.25", ""), ("},", "}3,"), ("}}", "}3}"), (":{", ":"))]
    other = [large(GOOD_METRICS.replace(":", " : ")), large(GOOD_METRICS.replace(":5,", ":-5,")),
             large(GOOD_METRICS.replace('"pii"', '"p\\u0069i"')),
             large(GOOD_METRICS, '"recommended_models":["qwen3","llama"],'),
             large(GOOD_METRICS, '"inner":{"metrics":{"domain":{"execution_time_ms":9}}},'),
             large(GOOD_METRICS, '"deep":' + "[" * 200 + "]" * 200 + ","),
             large(GOOD_METRICS, '"cut":{"a":[1,2}],'),
             large(GOOD_METRICS.replace(":", " : "), '"deep":' + "[" * 200 + "]" * 200 + ",")]
    # one answer a number short beside one with a number too many (in a name); an answer
    # the scan cannot read (an escape before metrics) reporting a name before the others do
    odd = [large(GOOD_METRICS.replace('_ms":3.5', '_ms":')),
           large(GOOD_METRICS.replace('"pii"', '"p1ii"')),
           large(metrics_text([("late", 1.5, 0.5)]), '"note":"a\\"q",'),
           large(metrics_text([("later", 2.5, 0.5), ("domain", 1, 0.5)]))]
    return good + malformed + other + odd + good[::-1]


def pass_of_held_answers(scripted, answers):
    """Run one pass at concurrency 1 over the answers; return its results, times by name."""
    server = scripted(lambda prompt, number: [final_answer(answers[int(prompt)])])
    table = SignalTable()
    target = Target(parse_endpoint(server.url), signals=table)
    payloads = encode_prompts(target, [str(i) for i in range(len(answers))])
    loop = PassLoop(target, payloads, threading.Event(), PassPlan("x", 1))
    return [(r.number, r.status, r.decision, r.error, r.code, r.config_hash, r.reason,
             {n: ms for n, ms in zip(table.names, r.signal_ms) if ms is not None})
            for r in loop.run()], table.names


def test_answers_held_for_their_times_are_read_after_the_pass_as_they_would_be_at_once(
        scripted, monkeypatch):
    answers = held_answers()
    held = []
    real_settle = AnswerBook.settle

    def settle(self):
        held.append(sum(type(r.signal_ms) is HeldAnswer for r in self.results))
        real_settle(self)

    monkeypatch.setattr(AnswerBook, "settle", settle)
    monkeypatch.setattr(AnswerBook, "SETTLE_ANSWERS", 7)  # in steps, new names amid them
    results, names = pass_of_held_answers(scripted, answers)
    # everything past the decision is read after the pass: the scan and, for what it cannot
    # read, the classification again (bad_json, the times decoded), each in its turn
    assert held == [len(answers)]
    # nothing held; the first two, then (the third does not fit) every one at once
    for budget in (0, len(answers[0]) + len(answers[1])):
        monkeypatch.setattr(AnswerBook, "HOLD_BYTES", budget)
        again, again_names = pass_of_held_answers(scripted, answers)
        assert again == results and held[-1] == (0 if budget == 0 else 2)
        if budget == 0:
            assert again_names == names == ["domain", "pii", "keyword", "kb", "jailbreak",
                                            "p1ii", "late", "later"]
    errors = [r[3] for r in results]
    assert errors.count("bad_json") >= 5 and errors.count(None) >= 10, errors
    assert "malformed" in errors  # nested too deep past the decision, where it is read
    assert results[0][-1] == {"domain": 3.5, "pii": 5}
    # the answer a number short is bad_json, the one with a digit in a name its own
    assert [r[3] for r in results[-7:-5]] == ["bad_json", None]
    assert results[-6][-1] == {"domain": 3.5, "p1ii": 5}


def test_the_hold_counts_a_non_ascii_answer_at_four_bytes_a_character_and_skips_metrics_first(
        scripted, monkeypatch):
    # an answer of non-ASCII text may take 4 bytes a character as a str: counted so; one
    # whose metrics come before its decision is read at once, the hold left for the next
    wide = compact_answer(GOOD_METRICS).replace(b"x" * 600, "\u6162".encode() * 200)
    kb = metrics_text([("kb", 7, 1)])
    first = b'{"metrics":' + kb.encode() + b',' + compact_answer(GOOD_METRICS).replace(
        b'"metrics":' + GOOD_METRICS.encode() + b',', b'')[1:]
    plain = compact_answer(kb)
    chars = len(wide.decode())
    held = []
    real_settle = AnswerBook.settle

    def settle(self):
        held.append([type(r.signal_ms) is HeldAnswer for r in self.results])
        real_settle(self)

    monkeypatch.setattr(AnswerBook, "settle", settle)
    read_at_once = None
    for budget, expected in ((0, [False] * 3), (4 * chars - 1, [False] * 3),
                             (4 * chars, [True, False, False]),
                             (4 * chars + len(plain), [True, False, True]),
                             (10 ** 6, [True, False, True])):  # where the second fits too
        monkeypatch.setattr(AnswerBook, "HOLD_BYTES", budget)
        results, names = pass_of_held_answers(scripted, [wide, first, plain])
        assert held[-1] == expected, budget
        read_at_once = read_at_once or (results, names)
        # held or not, the same times; the names of an answer read at once come before
        # those of the answers held before it
        assert results == read_at_once[0] and sorted(names) == sorted(read_at_once[1])
    assert [r[-1] for r in read_at_once[0]] == [{"domain": 3.5, "pii": 5}] + [{"kb": 7}] * 2


@pytest.mark.parametrize("spoiled", [None, ("3.5", "3.5.1"), ("0.25", ""), (":5,", ":-5,")])
def test_answers_scanned_together_give_what_scanning_one_after_another_gives(spoiled):
    entries = [[("keyword", 0, 0), ("domain", 3.5, 0.9), ("pii", 5, 0.25)],
               [("keyword", 1.25, 0.125), ("domain", 3.123456789, 0.5), ("pii", 0, 0)],
               [("domain", 12, 0.5), ("pii", 0.00125, 0.1), ("jailbreak", 2.5, 0.3)],
               [("keyword", 0, 0), ("domain", 3.5, 0.9), ("pii", 5, 0.25)], [],
               [("kb", 123456.78901, 1), ("domain", 0, 0)]] * 3
    texts = [compact_answer(metrics_text(e)).decode() for e in entries]
    if spoiled:  # one answer in the middle is not a list of numbers, or has a negative time
        texts[7] = compact_answer(GOOD_METRICS.replace(*spoiled)).decode()
    answers = [[text, top_members(text, *signal_reading())[1]] for text in texts]
    together, one_by_one = SignalTable(), SignalTable()
    found = together.scan_many(answers)
    assert found == [one_by_one.scan(text, at) for text, at in answers]
    assert together.names == one_by_one.names == ["domain", "pii", "keyword", "jailbreak", "kb"]
    assert (found[7] is None) == bool(spoiled) and found[2] == (12, 0.0013, None, 2.5)


# the texts of numbers the router writes (3 decimals, Go's float64 confidences), and those
# it does not: 0 spelled with decimals, more than 4 decimals, an exponent, a sign, 12 integer
# digits or more, and texts that are not JSON numbers at all
NUMBER_TEXTS = ["0", "0.0", "0.000", "3", "2.11", "5.071", "0.9", "0.8765432119369507", "1",
                "3.123456789", "0.00005", "0.000049", "12.34565", "99999999999.9999",
                "99999999999", "100000000000", "123456789012.5", "-1.5", "-0", "1e-07", "2E3",
                "1" + "0" * 400 + ".5", "3.", "03", "+1", "", ".5", "1.2.3", "--1"]


SIGNAL_NAMES = ["keyword", "domain", "pii", "jailbreak", "kb", "fact_check", "p2ii"]


@st.composite
def metrics_objects(draw):
    names = draw(st.lists(st.sampled_from(SIGNAL_NAMES), max_size=5, unique=True))
    numbers = st.sampled_from(NUMBER_TEXTS)
    return "{%s}" % ",".join(f'"{name}":{{"execution_time_ms":{draw(numbers)},'
                             f'"confidence":{draw(numbers)}}}' for name in names)


@SETTINGS
@given(st.lists(metrics_objects(), min_size=1, max_size=12))
def test_any_metrics_object_is_read_as_decoding_the_answer_reads_it(objects):
    # one table over answers of names and numbers of every kind, read at once by classify
    # and held then scanned together, against the answers decoded whole
    scanned, decoded, together = SignalTable(), SignalTable(), SignalTable()
    held, expected = [], []
    for metrics in objects:
        body = compact_answer(metrics)
        try:
            document = json.loads(body)
        except ValueError:
            document = None
        decision, error = classify(200, body, DEFAULT_DECISION_PATHS,
                                      signals=scanned)[:2]
        if document is None:
            assert error == "bad_json", metrics
            continue
        assert (decision, error) == ("math|qwen3", None), metrics
        expected.append(decoded.times(document))
        assert scanned.last == expected[-1], metrics
        assert [type(v) for v in scanned.last] == [type(v) for v in expected[-1]]
        text = body.decode()
        held.append([text, top_members(text, *signal_reading())[1]])
    assert scanned.names == decoded.names
    in_turn = {}  # what the scan leaves unread is read as the answer decoded, in its turn
    found = together.scan_many(
        held, lambda i: in_turn.setdefault(i, together.times(json.loads(held[i][0]))))
    assert all(found[i] is None for i in in_turn)
    assert [in_turn.get(i, one) for i, one in enumerate(found)] == expected
    assert together.names == decoded.names


@pytest.mark.parametrize("hold", [True, False], ids=["held", "read-at-once"])
def test_an_answer_that_carries_no_times_records_none_not_the_answer_before_it(
        scripted, monkeypatch, hold):
    # an error status and an empty body are classified without reading the body: their
    # times are none, whatever the answer before them (held or read at once) carried
    if not hold:
        monkeypatch.setattr(AnswerBook, "HOLD_BYTES", 0)
    timed = compact_answer(GOOD_METRICS)
    small = b'{"decision_result":{"decision_name":"math"},"metrics":{"pii":' \
            b'{"execution_time_ms":2,"confidence":1}}}'
    error = b'{"error":{"code":"OVERLOADED","message":"busy","timestamp":"t"}}'
    answers = [final_answer(timed), final_answer(error, b"503 Service Unavailable"),
               final_answer(small), final_answer(b""), final_answer(timed),
               final_answer(error, b"429 Too Many Requests")]
    server = scripted(lambda prompt, number: [answers[int(prompt)]])
    table = SignalTable()
    target = Target(parse_endpoint(server.url), signals=table)
    payloads = encode_prompts(target, [str(i) for i in range(len(answers))])
    loop = PassLoop(target, payloads, threading.Event(), PassPlan("x", 1))
    found = {r.number: (r.error, {n: ms for n, ms in zip(table.names, r.signal_ms)
                                  if ms is not None}) for r in loop.run()}
    assert found == {0: (None, {"domain": 3.5, "pii": 5}), 1: ("http_5xx", {}),
                     2: (None, {"pii": 2}), 3: ("no_decision", {}),
                     4: (None, {"domain": 3.5, "pii": 5}), 5: ("http_4xx", {})}


def test_both_runtime_names_are_read():
    for name in ("vllm_srun_result_cache_total", "vllm_sr_runtime_result_cache_total",
                 "vsr_model_runtime_result_cache_total"):
        assert CACHE_SERIES.match(name)
    assert {"vllm_srun_queue_duration_seconds",
            "vllm_sr_runtime_queue_duration_seconds"} <= set(DEFAULT_HISTOGRAMS)
    assert HISTOGRAM_PARTS["vllm_sr_runtime_queue_duration_seconds"] == "runtime_queue"
