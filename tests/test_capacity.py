"""run --ladder and what it derives: the plateau, the knee, capacity within an SLO and cost
per million requests; their rows in rounds, --gate capacity, the Pareto plot; simulate
--workers."""

import json
import math
import xml.etree.ElementTree as ElementTree

import pytest

from router_latency.constants import LADDER_METRICS, LADDER_PASS
from router_latency.words import plural
from router_latency.stats import mean_interval
from router_latency.files import write_atomic
from router_latency.runfile import dump_run, Ladder, load_run, RunFile, RunSettings
from router_latency.ladder import run_capacity
from router_latency.client import parse_endpoint
from router_latency.passloop import Target
from router_latency.measuring import LoadGuard, plan_passes, RunPlan, settings_record
from router_latency.gate import GateSettings
from router_latency.judged import row_change_text
from router_latency.rounds import judge_rounds
from router_latency.render_text import format_rounds, gate_text
from router_latency.page import report_page
from router_latency.command_rounds import gate_list
from conftest import assert_one_line_error, make_run, pass_of, write_corpus


# long beside the driver's own time per request, on 2 shared cores: at one caller per worker
# each request's turnaround (the answer's wake-up, the next send) leaves the worker idle, and
# under two copies of the suite and more that took 10 ms a request, 25% of 40 ms
DELAY_MS = 100.0


def ladder_run(cli, tmp_path, url, *extra, label="x", prompts=16, warmup=2):
    corpus = write_corpus(tmp_path / "corpus.json", [f"question {i}" for i in range(prompts)])
    out = tmp_path / f"{label}.json"
    result = cli("run", "--url", url, "--corpus", corpus, "--out", out, "--label", label,
                 "--ladder", "--warmup", str(warmup), "--timeout", "5",
                 "--router-max-concurrency", "8", *extra)
    return result, out


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_the_ladder_finds_the_plateau_of_n_workers_and_the_knee_at_n_callers(
        tmp_path, cli, simulator, workers):
    # N requests served at once, each DELAY_MS: throughput stops at N x 1000 / DELAY_MS, from
    # N callers on; beyond them callers wait for a worker, so p50 doubles with callers
    router = simulator(delay_ms=DELAY_MS, workers=workers)
    # steps of equal time: a short step's fixed costs (the first send, the last answer) would
    # weigh on its rate. The step of N callers loses a share L of its rate to the turnaround
    # (above, up to 10%) and to a stall of the machine (S seconds cost S / duration), while
    # 2N's queue keeps every worker busy. With a margin m it must stay flat against 2N
    # (L < 1 - 1/(1 + m)) and its p50, some x ms above DELAY_MS, must still make the knee
    # ((200 + x) / (100 + x) > (1 + m) / (1 - L)); a doubling of workers is never flat. At
    # x = 30 ms, m = 20% allowed L up to 17% and m = 30% 23%: steps of 0.5 s at 30% tolerate
    # a stall of 65 ms beside a 10% turnaround, as steps of 1 s at 20% did (67 ms; steps of
    # 0.5 s at 20% lost 17% of 2 workers' step once in CI, 85 ms). No warm-up (two requests
    # of DELAY_MS): the readiness check's preview has been through the simulator, and a
    # step's first request took what the others did (under load, 33 ladders each way: 107.5
    # ms on average without a warm-up, 108.8 with one, the others 104.6 and 107.1).
    # The ladder climbs from half the workers (1 for one): a doubling that grows, the
    # plateau, and the step that finds it flat; 4 workers' step of 1 caller took 0.5 s more
    steps = sorted({max(workers // 2, 1), workers, 2 * workers})
    result, out = ladder_run(cli, tmp_path, router.url, "--duration", "0.5s",
                             "--ladder-margin", "30", "-c", ",".join(map(str, steps)),
                             warmup=0)
    assert result.code == 0, result.err
    capacity = run_capacity(load_run(str(out)))
    expected = workers * 1000 / DELAY_MS
    assert abs(capacity.plateau_req_per_s - expected) <= 0.05 * expected
    assert capacity.plateau.load == workers
    assert capacity.knee[0].load == workers
    # the climb stopped at the step after the plateau began: more callers only queue
    assert [s.load for s in capacity.steps][-1] == 2 * workers
    assert "stopped: throughput stopped growing" in result.out
    callers = plural(workers, "caller")
    assert f"throughput stops growing from {callers} at " in result.out
    assert f"the knee is at {callers}: beyond, latency grows faster than throughput" \
        in result.out


def test_the_serial_simulator_saturates_at_one_or_two_callers(tmp_path, cli, simulator):
    router = simulator(delay_ms=10.0, serial=True)
    # an SLO no step comes near (8 callers queue 80 ms at most here): one of 50 ms, between
    # the 40 ms of 4 callers and the 80 of 8, was passed at 4 on a loaded machine (62.9 ms).
    # A margin of 30%: a step of 0.3 s loses a share of its rate to a stall of the machine,
    # and at the default 10% a 2-caller step 10% below the next made the plateau 4 callers
    # (-n 4, two copies of the suite: 76.1 req/s at 1 caller, 97.8 at 4, 99.7 at 8)
    result, out = ladder_run(cli, tmp_path, router.url, "--slo-p95-ms", "1000",
                             "--ladder-margin", "30", "--cost-per-hour", "x=2.50/GPU",
                             prompts=30)
    assert result.code == 0, result.err
    capacity = run_capacity(load_run(str(out)))
    assert capacity.plateau.load in (1, 2)
    # one request at a time, 10 ms each: at most 100 req/s (5% for the timer); a loaded
    # machine only lowers it (90.5 req/s under two copies of the suite), so no lower bound
    # but the one a stalled ladder would break
    assert 50 <= capacity.plateau_req_per_s <= 105
    # every step within the SLO: capacity is the most a step served, and cost follows
    served = max(s.req_per_s for s in capacity.steps)
    assert capacity.capacity_req_per_s == served
    cost = 2.5 / (served * 3600) * 1e6
    assert (f"x 10^6 = USD {cost:.4g} per million routed requests") in result.out
    assert "USD 2.5 per GPU-hour" in result.out


def test_a_ladder_stops_where_the_router_sheds_and_names_its_admission_limit(
        tmp_path, cli, simulator):
    router = simulator(delay_ms=10.0, workers=8, max_concurrency=2)
    result, out = ladder_run(cli, tmp_path, router.url)
    run = load_run(str(out))
    assert [p.name for p in run.passes] == ["sequential", "c2", "c4"]
    assert run.complete
    assert "the router shed" in result.err and "its admission limit" in result.err
    assert "shed: not counted" in result.out
    capacity = run_capacity(run)
    assert capacity.plateau is None  # the step that shed is left out: 2 callers still grew
    assert "; the router shed from 4 callers (its admission limit)" in result.out
    assert result.code == 1  # shed requests are failed requests, as in any run


def test_a_ladder_stops_where_p95_passes_the_slo(tmp_path, cli, simulator):
    # one caller's p95 is 100 ms and whatever the load adds (more than 30 ms seen under two
    # copies of the suite), two callers' twice that less a turnaround: an SLO of 150 ms
    # lies 50 ms from both. Three prompts: at two callers each but the first waits for the
    # other's (p95 200 ms), as with eight; no warm-up (two requests of 100 ms)
    router = simulator(delay_ms=100.0, serial=True)
    result, out = ladder_run(cli, tmp_path, router.url, "--slo-p95-ms", "150", prompts=3,
                             warmup=0)
    assert result.code == 0, result.err
    assert [p.name for p in load_run(str(out)).passes] == ["sequential", "c2"]
    assert "passed the SLO (--slo-p95-ms 150)" in result.out


def test_a_ladder_file_reads_back_to_the_same_bytes_and_older_files_have_no_ladder(tmp_path):
    plan = RunPlan(plan_passes((1, 2, 4)), ladder=Ladder(10.0, 50.0))
    target = Target(parse_endpoint("http://127.0.0.1:1"))
    settings = settings_record(target, plan, LoadGuard())
    run = RunFile("x", True, {"path": "c.json", "sha256": "0" * 64, "count": 40},
                     (pass_of(1, 100, 10), pass_of(2, 105, 20)), settings=settings)
    written = b"".join(dump_run(run))
    path = tmp_path / "ladder.json"
    path.write_bytes(written)
    loaded = load_run(str(path))
    assert b"".join(dump_run(loaded)) == written
    assert loaded.ladder == Ladder(10.0, 50.0)
    assert run_capacity(loaded).plateau.load == 1
    old = load_run(make_run(tmp_path / "old.json"))
    assert old.ladder is None and run_capacity(old) is None
    assert b'"ladder"' not in b"".join(dump_run(old))


@pytest.mark.parametrize("ladder, field, message", [
    ([], "settings.ladder", "expected an object or null"),
    ({"margin_pct": "10"}, "settings.ladder.margin_pct", "expected a finite number"),
    ({"margin_pct": 10, "slo_p95_ms": 0}, "settings.ladder.slo_p95_ms",
     "expected a positive number"),
])
def test_a_bad_ladder_setting_is_named(tmp_path, cli, ladder, field, message):
    good = make_run(tmp_path / "good.json")
    document = json.loads(open(good).read())
    document["settings"]["ladder"] = ladder
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    assert_one_line_error(cli("compare", good, bad), f"{bad}: {field}", message)


@pytest.mark.parametrize("argv, where, message", [
    (["--ladder", "-c", "4,2"], "--concurrency", "a ladder climbs: expected rising steps"),
    (["--ladder", "--rate", "100,50"], "--rate", "a ladder climbs: expected rising steps"),
    (["--ladder", "-c", "1,2", "--rate", "50"], "--ladder", "callers or rates, not both"),
    (["--slo-p95-ms", "50"], "--slo-p95-ms", "only a ladder uses it"),
    (["--ladder-margin", "5"], "--ladder-margin", "only a ladder uses it"),
    (["--cost-per-hour", "2.5"], "--cost-per-hour", "only a ladder uses it"),
    (["--ladder", "--cost-per-hour", "other=2"], "--cost-per-hour", "other is not a side"),
    (["--ladder", "--cost-per-hour", "x=-2"], "--cost-per-hour", "expected [SIDE=]USD"),
    (["--ladder", "--cost-per-hour", "x=0"], "--cost-per-hour", "above 0"),
])
def test_bad_ladder_options_are_one_line_errors(tmp_path, cli, argv, where, message):
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "x.json", "--label", "x", "--check", *argv)
    assert_one_line_error(result, where, message)
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("argv, message", [
    (["--workers", "0"], "expected a whole number from 1 to 1024"),
    (["--workers", "2", "--serial"], "not allowed with argument"),
])
def test_simulate_workers_bad_options(cli, argv, message):
    result = cli("simulate", "--port", "0", *argv)
    assert result.code == 2 and message in result.err


def ladder_in_memory(label, number, top, slo=50.0):
    """Return a ladder RunFile of a node that saturates at `top` req/s from 4 callers."""
    figures = [(1, top / 4, 10.0), (2, top / 2, 10.0), (4, top * 0.97, 11.0),
               (8, top, 22.0 + number), (16, top, 60.0)]
    passes = tuple(pass_of(c, rps, p95) for c, rps, p95 in figures)
    return RunFile(label, True, {"path": "c.json", "sha256": "0" * 64, "count": 40}, passes,
                      started_unix=2.0 * number + (label == "new"),
                      settings=RunSettings(ladder=Ladder(10.0, slo),
                                              concurrency=(1, 2, 4, 8, 16)),
                      path=f"r{number}-{label}.json")


def ladder_rounds(new_tops=(400, 410, 395)):
    return {n: {"base": ladder_in_memory("base", n, 100.0 + n),
                "new": ladder_in_memory("new", n, top)} for n, top in enumerate(new_tops, 1)}


def test_rounds_rows_of_plateau_capacity_and_cost_with_the_paired_estimator():
    settings = GateSettings(gate=gate_list("capacity"),
                               cost_per_hour=(("base", 0.9, "node"), ("new", 2.5, "GPU")))
    report = judge_rounds(ladder_rounds(), "base", "new", settings)
    rows = {r.metric: r for r in report.rows if r.pass_name == LADDER_PASS}
    assert list(rows) == list(LADDER_METRICS)
    assert [r.metric for r in report.rows if r.gated] == ["capacity_req_per_s"]
    plateau = rows["plateau_req_per_s"]
    assert plateau.base_values == (101.0, 102.0, 103.0)
    assert plateau.new_values == (400.0, 410.0, 395.0)
    logs = [math.log(n / b) for b, n in zip(plateau.base_values, plateau.new_values)]
    assert plateau.log_ratio == mean_interval(logs)
    # the cost row is the capacity row moved by the ratio of the prices: the same estimator
    capacity, cost = rows["capacity_req_per_s"], rows["usd_per_million"]
    assert cost.log_ratio.mean == pytest.approx(math.log(2.5 / 0.9) - capacity.log_ratio.mean)
    assert cost.log_ratio.high - cost.log_ratio.low == pytest.approx(
        capacity.log_ratio.high - capacity.log_ratio.low)
    assert cost.base_values[0] == pytest.approx(0.9 / (capacity.base_values[0] * 3600) * 1e6)
    # a cost's change in the one form of every change: the signed percent of the cost
    assert row_change_text(cost).split(" [")[0] == \
        f"{100 * math.expm1(cost.log_ratio.mean):+.1f}%"
    lines = format_rounds(report)
    assert any(line.startswith("Ladder") and "plateau req/s" in line for line in lines)
    assert "new: throughput stops growing from 4 callers (3 of 3 rounds) at 400 req/s " \
           "(395-410 over 3 rounds); beyond, callers queue (p50 grows with callers)" in lines
    assert any(line.startswith("cost per million requests, new/base: ") for line in lines)
    assert "the ladder's capacity req/s" in gate_text(settings)


def test_a_lower_capacity_fails_the_capacity_gate():
    report = judge_rounds(ladder_rounds(new_tops=(80, 79, 81)), "base", "new",
                             GateSettings(gate=gate_list("p50,capacity")))
    assert report.status == "fail"
    assert "Ladder capacity req/s is worse than the tolerance" in report.reasons


def test_gate_capacity_without_ladders_is_an_input_error(tmp_path, cli):
    for number in (1, 2, 3):
        for side in ("cpu", "gpu"):
            make_run(tmp_path / f"r{number}-{side}.json", label=side,
                     started_unix=1000.0 * number + 300 * (side == "gpu"))
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--gate",
                 "capacity")
    assert_one_line_error(result, "--gate capacity", "no capacity req/s row to gate: the runs "
                                                     "are not ladders (run --ladder)")


@pytest.mark.parametrize("text, gate", [
    ("capacity", ("capacity_req_per_s",)),
    ("p95,ladder:cost", ("p95_ms", "usd_per_million")),
    ("plateau,c4:p50", ("plateau_req_per_s", "c4:p50_ms")),
])
def test_gate_names_a_ladders_rows(text, gate):
    assert gate_list(text) == gate


def test_the_report_page_draws_the_pareto_plot():
    report = judge_rounds(ladder_rounds(), "base", "new", GateSettings())
    page = report_page(report)
    root = ElementTree.fromstring(page)  # polyglot: XML reads it as a browser does
    svg = "{http://www.w3.org/2000/svg}"
    plot = next(e for e in root.iter(f"{svg}svg")
                if e.get("aria-label") == "throughput against p95")
    lines = plot.findall(f"{svg}polyline")
    # each round of each side faint, one bold median per side
    assert len(lines) == 3 * 2 + 2
    assert sorted({line.get("stroke-width") for line in lines}) == ["1.2", "3.2"]
    texts = ["".join(t.itertext()) for t in plot.iter(f"{svg}text")]
    assert "SLO: p95 50 ms" in texts
    assert any(t.startswith("new capacity ") for t in texts)
    no_ladder = judge_rounds({n: {s: r._replace(settings=RunSettings()) for s, r in sides.items()}
                                 for n, sides in ladder_rounds().items()}, "base", "new")
    assert "throughput against p95" not in report_page(no_ladder)


def test_compare_prints_both_ladders_and_the_ratio_of_their_costs(tmp_path, cli):
    paths = []
    for label, top in (("cpu", 100.0), ("gpu", 400.0)):
        run = ladder_in_memory(label, 1, top)._replace(path="")
        path = tmp_path / f"{label}.json"
        write_atomic(str(path), dump_run(run))
        paths.append(path)
    result = cli("compare", *paths, "--cost-per-hour", "cpu=0.90", "--cost-per-hour",
                 "gpu=2.50/GPU")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    # 8 callers are within the 50 ms SLO (p95 23 ms), 16 beyond it (60 ms) with no more
    # throughput: capacity is the 8-caller step, 100 and 400 req/s
    assert "capacity within the SLO, gpu/cpu: 4" in lines
    cpu, gpu = 0.9 / (100 * 3600) * 1e6, 2.5 / (400 * 3600) * 1e6
    assert f"cost per million requests, gpu/cpu: {gpu / cpu:.3g} (USD {gpu:.4g} against " \
           f"{cpu:.4g})" in lines
    assert "USD 2.5 per GPU-hour / (400.00 req/s x 3600) x 10^6 = USD 1.736 per million routed " \
           "requests" in result.out
    other = cli("compare", *paths, "--cost-per-hour", "tpu=1")
    assert_one_line_error(other, "--cost-per-hour", "tpu is not a side measured")


def test_rounds_says_why_a_ladder_row_is_missing():
    report = judge_rounds(ladder_rounds(), "base", "new",
                             GateSettings(slo_p95_ms=5.0, cost_per_hour=((None, 1.0, "node"),)))
    lines = format_rounds(report)
    # every step's p95 (10 ms and more) is beyond a 5 ms SLO: no capacity, so no cost either
    assert [r.metric for r in report.rows if r.pass_name == LADDER_PASS] == \
        ["plateau_req_per_s"]
    assert "no capacity req/s row: none in r1 base, r1 new, r2 base, r2 new, r3 base, r3 new" \
        in lines
    assert any(line.startswith("base: capacity within p95 <= 5 ms: none in any round (the "
                               "first step (1 caller) already had p95 10.0 ms") for line in lines)
    unpriced = format_rounds(judge_rounds(ladder_rounds(), "base", "new"))
    assert "no USD/1M row: no --cost-per-hour SIDE=USD for base and new" in unpriced
