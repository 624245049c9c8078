"""history: the store across commits, the trend, the drift gate and its page."""

import fcntl
import hashlib
import json
import math
import os
import shutil
import threading
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import cmarkgfm
import pytest

from router_latency.errors import RouterLatencyError
from router_latency.gate import gate_rows, GateSettings, row_of, word_status
from router_latency.history import (add_entries, entry_of_run, EntryTags, history_report,
                                    HISTORY_SCHEMA, HistoryEntry, HistoryRow, read_history,
                                    step_of, TrendSettings)
from router_latency.history_render import format_history, history_json
from conftest import BASE, history_rounds_folder, make_run, ROOT, run_main, three_rounds
from test_pools import as_pools

# its run files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


def chain(tmp_path, ratios, seed=1, **options):
    """Return rounds folders c1, c2, ... in a parent folder, oldest first."""
    parent = tmp_path / "old"
    for index, ratio in enumerate(ratios):
        history_rounds_folder(parent / f"c{index + 1}", ratio, seed=seed * 100 + index,
                      start=10000.0 * index, scale=math.prod(ratios[:index]), **options)
    return parent


@pytest.fixture(scope="module")
def drifted(tmp_path_factory):
    """Six commits, each 2.5% slower than the one before, added one by one: made once a
    module for the four tests that read it (and write nothing there)."""
    folder = tmp_path_factory.mktemp("drifted")
    store = folder / "perf.jsonl"
    with pytest.MonkeyPatch.context() as patch:  # as no_fsync, for a module's fixture
        patch.setattr(os, "fsync", lambda fd: None)
        parent = chain(folder, [1.025] * 6)
        for index in range(1, 7):
            result = run_main("history", "add", "--history", store, "--dir",
                              parent / f"c{index}", "--base", "main", "--new", "merge",
                              "--commit", f"c{index}", "--branch", "main", "--date",
                              f"2026-01-0{index}")
            assert result.code == 0, result.err
            assert "PASS on its own" in result.out or "INCONCLUSIVE on its own" in result.out
    return store


def test_six_small_steps_drift_about_15_percent_and_the_gate_fails_naming_them(drifted, cli):
    result = cli("history", "report", "--history", drifted, "--gate")
    assert result.code == 1, result.out
    first = result.out.splitlines()[0]
    assert first.startswith("DRIFT FAIL: 6 commits like c6 since the base of c1")
    reasons = result.out.splitlines()[1]
    found = [float(v) for v in
             __import__("re").findall(r"drifted ([+-][\d.]+)% \[([+-][\d.]+)%, ([+-][\d.]+)%\]",
                                      reasons)[0]]
    assert 13 < found[0] < 18 and 5 < found[1] < found[0] < found[2]
    assert "worse than the 5% tolerance; most from c" in reasons
    assert len(__import__("re").findall(r"c\d \(\+\d\.\d%\)", reasons)) == 3
    # req/s written as every change is (of the time per request): a throughput drop reads +
    rate = next(line for line in result.out.splitlines()
                if line.startswith("  Sequential req/s drifted "))
    assert rate.startswith("  Sequential req/s drifted +"), rate
    # without --gate the same report exits 0
    assert cli("history", "report", "--history", drifted).code == 0


def test_the_drift_sums_the_steps_and_their_variances(drifted):
    entries = read_history(str(drifted))
    report = history_report(str(drifted), entries, TrendSettings())
    row = next(r for r in report.rows if r.metric == "p50_ms")
    steps = [p.step for p in row.points]
    assert row.drift.mean == pytest.approx(math.fsum(s.mean for s in steps))
    assert row.drift.variance == pytest.approx(math.fsum(s.variance for s in steps))
    assert row.drift.low < row.drift.mean < row.drift.high
    # from a pinned baseline: the steps after it only
    pinned = history_report(str(drifted), entries, TrendSettings(baseline="c3"))
    row3 = next(r for r in pinned.rows if r.metric == "p50_ms")
    assert row3.drift.mean == pytest.approx(math.fsum(s.mean for s in steps[3:]))
    assert [p.cumulative is None for p in row3.points] == [True, True, False, False, False,
                                                           False]
    assert row3.points[2].cumulative.mean == 0.0


def test_a_a_series_does_not_fail_the_drift_gate(tmp_path, cli):
    store = tmp_path / "perf.jsonl"
    assert cli("history", "add", "--history", store, "--each", chain(tmp_path, [1.0] * 6),
               "--base", "main", "--new", "merge").code == 0
    result = cli("history", "report", "--history", store, "--gate")
    assert "change points (Holm over 6 steps, family-wise 5%): none" in result.out
    # six unchanged commits: every gated row's drift, worse end included, within the 5%
    # tolerance, so the gate passes (exit 0), not merely "does not fail"
    document = json.loads(cli("history", "report", "--history", store, "--format", "json").out)
    assert all(row["drift"]["high_pct"] < 5 for row in document["rows"]), document["rows"]
    assert result.code == 0 and result.out.startswith("DRIFT PASS"), result.out
    # and says what it showed: each gated row (the report's rows) within the tolerance
    assert f"\n  {len(document['rows'])} gated rows shown within the 5% tolerance since the " \
           f"base of c1\n" in result.out


def test_a_drift_whose_worse_end_passes_the_tolerance_is_inconclusive_and_exits_3(tmp_path,
                                                                                  cli):
    # one step of +3% over 5 noisy rounds: the drift's mean is within the 5% tolerance, its
    # interval's worse end beyond it: not shown within, so undecided, exit 3, not a pass
    parent = tmp_path / "old"
    history_rounds_folder(parent / "c1", 1.0, seed=700, noise=0.025)
    history_rounds_folder(parent / "c2", 1.03, seed=701, noise=0.025, start=10000.0)
    store = tmp_path / "perf.jsonl"
    assert cli("history", "add", "--history", store, "--each", parent, "--base", "main",
               "--new", "merge").code == 0
    document = json.loads(cli("history", "report", "--history", store, "--format", "json").out)
    drifts = [row["drift"] for row in document["rows"]]
    assert all(d["low_pct"] < d["pct"] < 5 < d["high_pct"] for d in drifts), drifts
    result = cli("history", "report", "--history", store, "--gate")
    assert result.code == 3, result.out
    assert result.out.startswith("DRIFT INCONCLUSIVE"), result.out
    assert "not shown within the 5% tolerance" in result.out
    assert document["status"] == "inconclusive" and document["exit_code"] == 3


def test_each_adds_the_folders_oldest_first_under_their_names(tmp_path, cli):
    parent = chain(tmp_path, [1.0, 1.02, 1.0])
    (parent / "c1").rename(parent / "zz-oldest")  # the name sorts last, the runs first
    store = tmp_path / "perf.jsonl"
    result = cli("history", "add", "--history", store, "--each", parent, "--base", "main",
                 "--new", "merge", "--branch", "main")
    assert result.code == 0, result.err
    assert [e.commit for e in read_history(str(store))] == ["zz-oldest", "c2", "c3"]
    assert [line.split(":")[0] for line in result.out.splitlines()] == \
        ["added zz-oldest", "added c2", "added c3"]


def test_entries_of_another_corpus_or_configuration_are_left_out_and_named(tmp_path, cli):
    store = tmp_path / "perf.jsonl"
    history_rounds_folder(tmp_path / "a", 1.0, seed=1)
    history_rounds_folder(tmp_path / "b", 1.2, seed=2, sha="b" * 64, start=10000.0)
    history_rounds_folder(tmp_path / "c", 1.2, seed=3, passes=(1, 4), start=20000.0)
    history_rounds_folder(tmp_path / "d", 1.0, seed=4, start=30000.0)
    for name in "abcd":
        assert cli("history", "add", "--history", store, "--dir", tmp_path / name, "--base",
                   "main", "--new", "merge", "--commit", name).code == 0
    result = cli("history", "report", "--history", store)
    assert "left out: b: corpus bbbbbbbbbbbb, not aaaaaaaaaaaa" in result.out
    assert "left out: c: configuration differs (passes 'sequential c4', not 'sequential')" \
        in result.out
    assert "2 commits like d" in result.out
    assert "(--allow-mismatch corpus|node|config compares them anyway" in result.out
    kept = cli("history", "report", "--history", store, "--allow-mismatch", "corpus",
               "--format", "json")
    document = json.loads(kept.out)
    assert [entry["commit"] for entry in document["left_out"]] == ["c"]
    assert [p["commit"] for p in document["rows"][0]["points"]] == ["a", "b", "d"]
    # the last entry measured on a named node, the others on none recorded
    lines = store.read_text().splitlines(keepends=True)
    store.write_text("".join(lines[:-1]) + lines[-1].replace('"node":""', '"node":"gpu-7"', 1))
    result = cli("history", "report", "--history", store)
    assert "left out: a: node (none), not gpu-7" in result.out, result.out


def test_the_markdown_renders_in_githubs_parser(drifted, cli):
    result = cli("history", "report", "--history", drifted, "--format", "markdown")
    html = cmarkgfm.github_flavored_markdown_to_html(result.out)
    assert "<strong>Drift: FAIL</strong>" in html
    assert html.count("<table>") == 3  # p50, p95, req/s of the one pass
    assert "<th align=\"right\">cumulative [95%]</th>" in html
    assert "<li>Sequential p50 drifted +" in html


def test_the_page_plots_the_series_and_the_cumulative_change(drifted, cli, tmp_path):
    page = tmp_path / "drift.html"
    assert cli("history", "report", "--history", drifted, "--html", page).code == 0
    text = page.read_text(encoding="utf-8")
    root = ElementTree.fromstring(text.split("\n", 1)[1])  # polyglot: XML reads it
    svg = "{http://www.w3.org/2000/svg}"
    plots = [s.get("aria-label") for s in root.iter(f"{svg}svg")]
    assert plots[:2] == ["Sequential p50: the series", "Sequential p50: cumulative change"]
    assert len(list(root.iter(f"{svg}polygon"))) == 3  # the band of each drift
    assert "<script" not in text and "http://" not in text.replace(
        "http://www.w3.org/", "")
    assert text.endswith(f"; history {drifted}</p>\n</body>\n</html>\n")  # which store


OLD_LINE = ROOT / "tests" / "data" / "history-v1.jsonl"


def test_a_history_written_by_version_1_is_read(tmp_path, cli):
    """tests/data/history-v1.jsonl was written by history add of schema 1: every later
    version must read it (a new field is added, never renamed; a line may carry fields this
    version does not know)."""
    store = tmp_path / "perf.jsonl"
    shutil.copy(OLD_LINE, store)
    lines = store.read_text().splitlines()
    assert all(json.loads(line)["schema"] == "router-latency-history/1" for line in lines)
    entries = read_history(str(store))
    assert [e.commit for e in entries] == ["c1", "c2", "c3"]
    newer = json.loads(lines[0])
    newer["a_field_of_a_later_version"] = {"x": 1}
    store.write_text(json.dumps(newer) + "\n" + "\n".join(lines[1:]) + "\n")
    assert [e.commit for e in read_history(str(store))] == ["c1", "c2", "c3"]
    result = cli("history", "report", "--history", store)
    assert result.code == 0 and "3 commits like c3" in result.out
    # and what this version writes today is what the file holds: schema 1
    history_rounds_folder(tmp_path / "c4", 1.0, seed=9, start=90000.0)
    assert cli("history", "add", "--history", store, "--dir", tmp_path / "c4", "--base",
               "main", "--new", "merge", "--commit", "c4").code == 0
    assert json.loads(store.read_text().splitlines()[-1])["schema"] == HISTORY_SCHEMA


@pytest.mark.parametrize("line, message", [
    ('{"schema": "router-latency-history/2", "commit": "x"}', "written by another major"),
    ('{"schema": "router-latency-history/1", "commit": "x"}', "base_commit is missing"),
    ('{"commit": "x"}', "not a history line (no schema)"),
    ('{"schema": "router-latency-run/1", "commit": "x"}',
     "schema 'router-latency-run/1', not router-latency-history/1"),
    (OLD_LINE.read_text().splitlines()[0].replace('"metric":"p50_ms"', '"metric":5', 1),
     "metric is missing or not text"),  # a row's field
    ("{not json", "line 4"),
])
def test_a_bad_line_is_a_one_line_error_naming_it(tmp_path, cli, line, message):
    store = tmp_path / "perf.jsonl"
    store.write_text(OLD_LINE.read_text() + line + "\n")
    result = cli("history", "report", "--history", store)
    assert result.code == 2 and result.out == ""
    assert len(result.err.splitlines()) == 1 and message in result.err
    assert "line 4" in result.err


def test_a_folder_whose_rounds_are_left_out_is_refused_saying_why(tmp_path, cli):
    # two of three rounds left out (a load above the limit, a router restart): no row to add
    folder = tmp_path / "rounds"
    folder.mkdir()
    three_rounds(folder, flagged=True)
    result = cli("history", "add", "--history", tmp_path / "perf.jsonl", "--dir", folder,
                 "--base", "cpu", "--new", "gpu", "--commit", "c1")
    assert result.code == 2 and result.err.startswith(
        "router-latency: error: no usable rows (1 usable round, fewer than "), result.err
    assert result.err.endswith(f") ({folder})\n") and not (tmp_path / "perf.jsonl").exists()


def test_a_line_keeps_its_text_as_written_and_names_the_runs_host(tmp_path, cli):
    # a folder named in French, a run measured on host gpu-7: the line holds the path in
    # UTF-8 (what grep and a reader of the file see), the host in its environment
    store = tmp_path / "perf.jsonl"
    (tmp_path / "mesures-été").mkdir()
    run = Path(make_run(tmp_path / "mesures-été" / "one.json", label="merge",
                        passes={1: BASE}))
    document = json.loads(run.read_text())
    document["host"] = "gpu-7"
    run.write_text(json.dumps(document))
    assert cli("history", "add", "--history", store, "--run", run, "--commit", "c9").code == 0
    line = store.read_bytes()
    assert "mesures-été/one.json".encode() in line
    entry = json.loads(line)
    assert entry["environment"]["host"] == entry["node"] == "gpu-7"


def test_a_single_run_is_marked_and_not_in_the_drift(tmp_path, cli):
    store = tmp_path / "perf.jsonl"
    shutil.copy(OLD_LINE, store)
    run = make_run(tmp_path / "one.json", label="merge", passes={1: BASE})
    result = cli("history", "add", "--history", store, "--run", run, "--commit", "c9")
    assert result.code == 0 and result.out.startswith("added c9: run")
    report = cli("history", "report", "--history", store, "--format", "json")
    document = json.loads(report.out)
    assert document["rows"][0]["points"][-1]["kind"] == "run"
    assert document["rows"][0]["points"][-1]["step"] is None
    assert any("c9: a single run" in note for note in document["notes"])


@pytest.mark.parametrize("argv, message", [
    (["add"], "give one of --dir, --each or --run"),
    (["add", "--dir", "x", "--base", "a", "--new", "b"], "--dir and --run need --commit"),
    (["add", "--dir", "x", "--base", "a", "--new", "a", "--commit", "c"], "--base and --new"),
    (["add", "--dir", "nowhere", "--base", "a", "--new", "b", "--commit", "c"],
     "no such folder"),
    (["report", "--commit", "c"], "--commit is an option of history add"),
    (["add", "--gate"], "--gate is an option of history report"),
    (["report", "--baseline", "nothing"], "no entry of commit or label nothing"),
    # past the year 9999 (or before the year 1) in UTC: OverflowError, exit 1, on main
    (["add", "--date", "9999-12-31T23:59:59-01:00"], "expected an ISO 8601 date from the year "
                                                     "1 to 9999 in UTC"),
    (["add", "--date", "0001-01-01T00:00:00+01:00"], "from the year 1 to 9999 in UTC"),
])
def test_bad_input_is_a_one_line_error(tmp_path, cli, argv, message):
    store = tmp_path / "perf.jsonl"
    shutil.copy(OLD_LINE, store)
    before = store.read_bytes()
    result = cli("history", argv[0], "--history", store, *argv[1:])
    assert result.code == 2, result
    assert len(result.err.splitlines()) == 1 and message in result.err
    assert store.read_bytes() == before


def test_a_commit_is_added_once(tmp_path, cli):
    store = tmp_path / "perf.jsonl"
    shutil.copy(OLD_LINE, store)
    history_rounds_folder(tmp_path / "again", 1.0, seed=5)
    result = cli("history", "add", "--history", store, "--dir", tmp_path / "again", "--base",
                 "main", "--new", "merge", "--commit", "c2")
    assert result.code == 2 and "commit c2 is already in the history (line 2)" in result.err


def test_each_adds_all_its_folders_or_none(tmp_path, cli):
    parent = chain(tmp_path, [1.0, 1.0])
    history_rounds_folder(parent / "c3", 1.0, seed=8, rounds=2, start=50000.0)  # too few to judge
    store = tmp_path / "perf.jsonl"
    result = cli("history", "add", "--history", store, "--each", parent, "--base", "main",
                 "--new", "merge")
    assert result.code == 2 and "need at least 3 rounds" in result.err
    assert len(result.err.splitlines()) == 1 and "c3" in result.err
    assert not store.exists() and list(tmp_path.glob(".perf.jsonl*")) == []


def test_a_single_runs_entry_keeps_the_routers_config_hash(tmp_path):
    # it was recorded with none, so a run of a router that sends one was never like the
    # rounds entries of the same router (configuration differs) and was always left out
    path = Path(make_run(tmp_path / "one.json", label="merge", passes={1: BASE}))
    document = json.loads(path.read_text())
    document["passes"][0]["config_hashes"] = ["c" * 64]
    path.write_text(json.dumps(document))
    assert entry_of_run(str(path), EntryTags(commit="c9")).config["config_hash"] == "c" * 64


PATTERN = (0.01, -0.01, 0.0, 0.005, -0.005)  # each round's log ratio about the shift


SE = math.sqrt(math.fsum(e * e for e in PATTERN) / 4 / 5)  # of the mean of 5 rounds


TOLERANCE = math.log(1.05)


def both_gates(shifts):
    """Return the rounds gate's judgement of gated rows of 5 rounds whose log ratio new/base
    is shifts[metric] plus PATTERN, and the history report of one entry of those rounds: its
    drift from the first entry's base is that row's interval, on the same df."""
    base = (10.0,) * 5
    news = {m: tuple(10.0 * math.exp(shift + e) for e in PATTERN) for m, shift in shifts.items()}
    rows = [row_of("sequential", m, list(base), list(new), GateSettings())
            for m, new in news.items()]
    entry = HistoryEntry(commit="c1", base_commit="", branch="main", date="", label="",
                         kind="rounds", source="", verdict="", tolerance_pct=5.0,
                         corpus_sha256="a" * 64, config={}, node="n", node_class="",
                         environment={}, rows=tuple(HistoryRow("sequential", m, True, base, new)
                                                    for m, new in news.items()))
    return gate_rows(rows, GateSettings()), history_report("store", [entry], TrendSettings())


@pytest.mark.parametrize("shifts,status,words,held,share", [
    ({"p50_ms": 0.0, "p95_ms": 0.0}, "pass", ["same", "same"], False, False),
    ({"p50_ms": 0.045, "p95_ms": 0.0}, "inconclusive", ["inconclusive", "same"], False, False),
    # both worse: Holm rejects both, at 2.5% / 2 and then 2.5% (the drift's first report:
    # 1.25% / 2, then 1.25%)
    ({"p50_ms": TOLERANCE + 10 * SE, "p95_ms": TOLERANCE + 5 * SE}, "fail", ["worse", "worse"],
     False, False),
    # t = 3 beyond the tolerance: past 2.5%'s 2.78, short of Holm's first step (3.50) for two
    # rows, so held back; the drift's first report holds it at its share alone (1.25%: 3.50)
    ({"p50_ms": TOLERANCE + 3 * SE, "p95_ms": 0.0}, "inconclusive", ["inconclusive", "same"],
     True, True),
    # t = 4 alone: past 3.50, the first report's share of the series' 2.5% (1.25%)
    ({"p50_ms": TOLERANCE + 4 * SE}, "fail", ["worse"], False, False),
    # one row worse beside one undecided: the FAIL, exit 1, not the larger 3
    ({"p50_ms": TOLERANCE + 10 * SE, "p95_ms": 0.045}, "fail", ["worse", "inconclusive"],
     False, False)])
def test_the_drift_gate_and_the_rounds_gate_decide_the_same_intervals_alike(shifts, status,
                                                                             words, held,
                                                                             share):
    judged, report = both_gates(shifts)
    assert [r.verdict for r in judged.rows] == words
    assert (judged.outcome.status, judged.outcome.exit_code) == (report.status,
                                                                 report.exit_code)
    assert report.status == status and report.outcome.status == status
    assert report.exit_code == {"pass": 0, "fail": 1, "inconclusive": 3}[status]
    assert [word_status(r.verdict) for r in judged.rows] == [t.status for t in report.rows]
    for row, trend in zip(judged.rows, report.rows):  # the same interval, on the same df
        assert trend.drift is not None and row.judged is not None
        # (mean_interval's tabled t quantile, which the step's variance is read back from)
        assert math.isclose(trend.drift.high, row.judged.high, rel_tol=1e-7)
        assert math.isclose(trend.drift.df, row.judged.df)
    # held back by Holm, its interval wholly beyond the tolerance: "inconclusive (Holm)", in
    # the history report as in the rounds table (before: a bare INCONCLUSIVE); held by the
    # report's share of the series' level alone, it says that instead
    by_holm = held and not share
    assert judged.rows[0].held_by_holm == held and report.rows[0].held_by_holm == by_holm
    text = "\n".join(format_history(report))
    assert (f"{report.rows[0].title}: INCONCLUSIVE (Holm), drift " in text) == by_holm
    assert ("but Holm's correction for the 2 rows does not show it worse" in text) == by_holm
    assert ("not at report 1's share of the series' 2.5%" in text) == share
    assert history_json(report)["rows"][0]["held_by_holm"] == by_holm
    assert (report.rows[0].drift.low > TOLERANCE) == (held or words[0] == "worse")


def test_a_drift_past_the_reports_share_but_not_holms_is_held_by_holm():
    """t = 4 beyond the tolerance beside an unchanged row: past the first report's 1.25%
    alone (3.50), short of Holm's first step for two rows (0.625%: 4.31): INCONCLUSIVE
    (Holm), where the rounds gate (3.50 at its Holm first step) fails it."""
    judged, report = both_gates({"p50_ms": TOLERANCE + 4 * SE, "p95_ms": 0.0})
    assert judged.outcome.status == "fail"
    assert report.status == "inconclusive" and report.rows[0].held_by_holm
    assert "but Holm's correction for the 2 rows does not show it worse" in \
        "\n".join(format_history(report))


def test_the_first_report_spends_half_the_series_level_where_the_rounds_gate_spends_all():
    """t = 3 beyond the tolerance on 4 df, one row: the rounds gate fails it (past 2.5%'s
    2.78); the drift gate's first report, at 1.25% (3.50), holds it and says why."""
    judged, report = both_gates({"p50_ms": TOLERANCE + 3 * SE})
    assert judged.outcome.status == "fail"
    assert (report.status, report.report) == ("inconclusive", 1)
    assert report.fail_level == pytest.approx(0.0125)
    assert report.rows[0].drift.low > TOLERANCE
    assert "not at report 1's share of the series' 2.5% (1.25% one-sided" in \
        report.reasons[0]


def series_entries(steps, sigma, rng, rounds=5):
    """Return a series' entries c0, c1, ..., whose rows' log ratios are each step plus normal
    noise of spread sigma."""
    return [HistoryEntry(
        commit=f"c{index}", base_commit="", branch="main", date="", label="", kind="rounds",
        source="", verdict="", tolerance_pct=5.0, corpus_sha256="a" * 64, config={}, node="n",
        node_class="", environment={}, rows=(HistoryRow(
            "sequential", "p50_ms", True, (10.0,) * rounds,
            tuple(10.0 * math.exp(step + rng.gauss(0, sigma)) for _ in range(rounds))),))
        for index, step in enumerate(steps)]


def reported_after_each(steps, sigma, rng, rounds=5):
    """Return the reports made after each of a series' entries (series_entries)."""
    entries = series_entries(steps, sigma, rng, rounds)
    return [history_report("store", entries[:k], TrendSettings())
            for k in range(1, len(entries) + 1)]


def test_the_kth_report_spends_its_share_and_the_shares_sum_to_the_series_level():
    from router_latency.history import report_level
    shares = [report_level(k) for k in range(1, 10001)]
    assert all(a > b for a, b in zip(shares, shares[1:]))
    assert math.fsum(shares) < 0.025 and math.fsum(shares) > 0.025 * 0.9999
    rng = __import__("random").Random(5)
    reports = reported_after_each([0.0] * 6, 0.02, rng)
    assert [r.report for r in reports] == [1, 2, 3, 4, 5, 6]
    assert [r.fail_level for r in reports] == [report_level(k) for k in range(1, 7)]
    # from a pinned baseline the count starts again after it
    entries = series_entries([0.0] * 6, 0.02, rng)
    assert history_report("store", entries, TrendSettings(baseline="c2")).report == 3


def test_a_drift_held_at_the_tolerance_fails_less_often_over_reports_than_each_reports_level():
    """A first step at exactly the tolerance, then none, reported after each of 6 entries
    (rounds of spread 4%): 300 series. Each report's drift is at the tolerance (the gate's
    null at its edge); at 2.5% a report (the level before), some report failed in about
    10% of series; the spent levels keep it near or under 2.5%. The bound here, 6%, is
    above the worst count a 2.5% rate gives 300 series (about 4.4% at 4 standard errors) and
    below the 9-10% the repeated 2.5% made."""
    rng = __import__("random").Random(11)
    steps = [TOLERANCE] + [0.0] * 5
    failed = sum(any(r.status == "fail" for r in reported_after_each(steps, 0.04, rng))
                 for _ in range(300))
    assert failed <= 18, failed


def test_a_change_point_is_holms_step_down_over_the_steps():
    """A step of +10% among five of none is a change point, the others are not; one step of
    t 3 (past the one-step 2.78 of a two-sided 5%, short of Holm's 4.6 for five steps) is
    alone, not among five."""
    def trend(shifts):
        entries = [HistoryEntry(commit=f"c{i}", base_commit="", branch="main", date="",
                                label="", kind="rounds", source="", verdict="",
                                tolerance_pct=5.0, corpus_sha256="a" * 64, config={},
                                node="n", node_class="", environment={}, rows=(HistoryRow(
                                    "sequential", "p50_ms", True, (10.0,) * 5,
                                    tuple(10.0 * math.exp(shift + e) for e in PATTERN)),))
                   for i, shift in enumerate(shifts)]
        report = history_report("store", entries, TrendSettings())
        return [p.change_point for p in report.rows[0].points]
    assert trend([0.0, 0.0, 0.1, 0.0, 0.0]) == [False, False, True, False, False]
    assert trend([3 * SE]) == [True]
    assert trend([0.0, 0.0, 3 * SE, 0.0, 0.0]) == [False] * 5


def test_an_add_waits_its_turn_for_the_stores_lock_and_loses_no_line(tmp_path, monkeypatch):
    # two `history add` at once: each read the store, then renamed its own copy over it, and
    # 11 of 24 lines of 6 adds were lost; now an add waits for the store's lock, appends
    # whole lines, and a writer holding the lock keeps what it wrote
    store = tmp_path / "perf.jsonl"
    run = make_run(tmp_path / "one.json", label="merge", passes={1: BASE})
    add_entries(str(store), [entry_of_run(run, EntryTags(commit="c1"))])
    holder = os.open(store, os.O_WRONLY | os.O_APPEND)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another writer, in its turn
    later = make_run(tmp_path / "two.json", label="merge", passes={1: BASE},
                     started="2026-01-01T00:00:03Z")  # another measurement (each counts once)
    refused, flock = threading.Event(), fcntl.flock

    def flock_seen(fd, operation):
        try:
            return flock(fd, operation)
        except BlockingIOError:
            refused.set()  # the add asked for the lock and waits for it
            raise

    monkeypatch.setattr(fcntl, "flock", flock_seen)
    adding = threading.Thread(target=add_entries, args=(
        str(store), [entry_of_run(later, EntryTags(commit="c3"))]))
    adding.start()
    # it waits for the lock (a thread done by now read the store too early): the holder
    # writes once the add was refused the lock, or after 5 s for an add that never asks
    refused.wait(5)
    os.write(holder, store.read_bytes().replace(b'"c1"', b'"c2"'))
    os.close(holder)  # the lock with it
    adding.join(30)
    assert [entry.commit for entry in read_history(str(store))] == ["c1", "c2", "c3"]


def test_an_add_that_cannot_have_the_lock_says_so_in_one_line_and_writes_nothing(
        tmp_path, cli, monkeypatch):
    import router_latency.files as files
    monkeypatch.setattr(files, "LOCK_WAIT_S", 0.2)
    store = tmp_path / "perf.jsonl"
    shutil.copy(OLD_LINE, store)
    before = store.read_bytes()
    run = make_run(tmp_path / "one.json", label="merge", passes={1: BASE})
    holder = os.open(store, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        result = cli("history", "add", "--history", store, "--run", run, "--commit", "c9")
    finally:
        os.close(holder)
    assert result.code == 2 and result.out == ""
    assert result.err == (f"router-latency: error: another process has held the file's lock "
                          f"for 0.2 s (a history add still running, or a stuck one: fuser "
                          f"names it); nothing was written ({store})\n")
    assert store.read_bytes() == before


def test_many_adds_at_once_keep_every_line(tmp_path, monkeypatch):
    # a waiting add asks for the lock again every 5 ms, not 50: the twelve take their turns
    # sooner, as many at once
    monkeypatch.setattr("router_latency.files.LOCK_POLL_S", 0.005)
    store = tmp_path / "perf.jsonl"
    # twelve measurements (a run file counts once in the store)
    entries = [entry_of_run(make_run(tmp_path / f"r{index}.json", label="merge",
                                     passes={1: BASE}, started=f"2026-01-01T00:00:{index:02d}Z"),
                            EntryTags(commit=f"c{index}")) for index in range(12)]
    start = threading.Barrier(len(entries))

    def add(entry):
        start.wait(30)
        add_entries(str(store), [entry])
    threads = [threading.Thread(target=add, args=(entry,)) for entry in entries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(e.commit for e in read_history(str(store))) == sorted(
        e.commit for e in entries)


def test_a_run_whose_req_per_s_rounds_to_zero_is_added_and_read_back(tmp_path, cli):
    # entry_of_run stored a req/s of 0.0 (ok over wall seconds, rounded to 0.01) that the run
    # reader took; `history report` and every later `history add` then refused the store
    path = make_run(tmp_path / "slow.json", label="merge", passes={1: (10.0, 12.0, 13.0, 0.001)})
    assert json.loads(Path(path).read_text())["passes"][0]["summary"]["req_per_s"] == 0.0
    store = tmp_path / "perf.jsonl"
    added = cli("history", "add", "--history", store, "--run", path, "--commit", "c1")
    assert added.code == 0, added.err
    entry = read_history(str(store))[0]
    assert entry.rows and all(row.metric != "req_per_s" for row in entry.rows)
    later = make_run(tmp_path / "slow2.json", label="merge",
                     passes={1: (10.0, 12.0, 13.0, 0.001)}, started="2026-01-02T00:00:00Z")
    assert cli("history", "add", "--history", store, "--run", later, "--commit", "c2").code == 0
    assert cli("history", "report", "--history", store).code == 0


def test_an_entry_its_reader_would_refuse_is_never_written(tmp_path):
    store = tmp_path / "perf.jsonl"
    run = make_run(tmp_path / "one.json", label="merge", passes={1: BASE})
    entry = entry_of_run(run, EntryTags(commit="c1"))
    bad = entry._replace(commit="c2", rows=(HistoryRow("sequential", "p50_ms", True, (),
                                                       (float(2 ** 60),)),))
    add_entries(str(store), [entry])
    before = store.read_bytes()
    with pytest.raises(RouterLatencyError, match=r"^a row's values are not all positive numbers "
                                                 r"\(.*one\.json: its history line: rows\)$"):
        add_entries(str(store), [bad])
    assert store.read_bytes() == before


def test_a_measurement_in_two_entries_is_refused(tmp_path, cli):
    # the same folder under two commits: a +3% change counted twice read +7.47% and failed
    store = tmp_path / "perf.jsonl"
    history_rounds_folder(tmp_path / "once", 1.03, seed=3)
    assert cli("history", "add", "--history", store, "--dir", tmp_path / "once", "--base",
               "main", "--new", "merge", "--commit", "c1").code == 0
    before = store.read_bytes()
    again = cli("history", "add", "--history", store, "--dir", tmp_path / "once", "--base",
                "main", "--new", "merge", "--commit", "c2")
    assert again.code == 2 and len(again.err.splitlines()) == 1
    assert "already in the history under commit c1 (line 1)" in again.err
    assert store.read_bytes() == before
    # a copy of one run file in another folder is the same measurement too
    history_rounds_folder(tmp_path / "other", 1.0, seed=4)
    shutil.copy(tmp_path / "once" / "r2-merge.json", tmp_path / "other" / "r2-merge.json")
    copied = cli("history", "add", "--history", store, "--dir", tmp_path / "other", "--base",
                 "main", "--new", "merge", "--commit", "c2")
    assert copied.code == 2 and "under commit c1" in copied.err
    # and in two folders of one addition, the first not yet in the store
    history_rounds_folder(tmp_path / "each" / "c3", 1.0, seed=5, start=20000.0)
    history_rounds_folder(tmp_path / "each" / "c4", 1.0, seed=6, start=30000.0)
    shutil.copy(tmp_path / "each" / "c3" / "r2-merge.json",
                tmp_path / "each" / "c4" / "r2-merge.json")
    both = cli("history", "add", "--history", store, "--each", tmp_path / "each", "--base",
               "main", "--new", "merge")
    assert both.code == 2 and "under commit c3 (this addition)" in both.err, both.err
    assert store.read_bytes() == before


def test_a_run_file_added_twice_is_named_by_the_first_12_digits_of_its_sha256(tmp_path):
    # as `sha256sum` prints it, cut to the 12 digits every other message names a file by
    store = tmp_path / "perf.jsonl"
    run = make_run(tmp_path / "one.json", label="merge", passes={1: BASE})
    add_entries(str(store), [entry_of_run(run, EntryTags(commit="c1"))])
    digest = hashlib.sha256(Path(run).read_bytes()).hexdigest()
    with pytest.raises(RouterLatencyError) as raised:
        add_entries(str(store), [entry_of_run(run, EntryTags(commit="c2"))])
    assert f"{run}: a run file of it (sha256 {digest[:12]}) is already in the history under " \
           f"commit c1 (line 1)" in str(raised.value)


def test_a_step_that_overlaps_the_previous_ones_is_refused_with_the_reason(tmp_path, cli):
    # c3 measured against c1 while c2 (against c1) is in: its step holds c2's again
    store = tmp_path / "perf.jsonl"
    parent = chain(tmp_path, [1.02, 1.02, 1.02])

    def add(index, base_commit):
        return cli("history", "add", "--history", store, "--dir", parent / f"c{index}",
                   "--base", "main", "--new", "merge", "--commit", f"c{index}",
                   "--base-commit", base_commit)
    assert add(1, "c0").code == 0 and add(2, "c1").code == 0
    overlapping = add(3, "c1")
    assert overlapping.code == 2 and "its base ran commit c1, not the previous entry's c2" \
        in overlapping.err
    assert add(3, "c2").code == 0
    # a base the series does not hold is a gap (a skipped merge), as before: not refused
    history_rounds_folder(parent / "c5", 1.0, seed=9, start=90000.0)
    assert add(5, "c4").code == 0


def test_the_step_of_an_odd_number_of_rounds_is_balanced_over_the_start_order():
    # running second costs 2%: with base first in 3 of 5 rounds the plain mean keeps 2%/5
    cost, step = math.log(1.02), math.log(1.01)
    new_first = (False, True, False, True, False)
    logs = [step + (-cost if first else cost) for first in new_first]
    row = HistoryRow("sequential", "p50_ms", True, (10.0,) * 5,
                     tuple(10.0 * math.exp(v) for v in logs))
    plain = step_of(row)
    balanced = step_of(row, new_first)
    assert plain.mean == pytest.approx(step + cost / 5)
    assert balanced.mean == pytest.approx(step) and balanced.df == 3
    # one order only, or unknown: the plain mean
    assert step_of(row, (False,) * 5).mean == pytest.approx(plain.mean)
    assert step_of(row, ()).mean == pytest.approx(plain.mean)


def test_an_older_line_without_digests_or_order_still_reads(tmp_path, cli):
    store = tmp_path / "perf.jsonl"
    shutil.copy(OLD_LINE, store)
    entries = read_history(str(store))
    assert entries and all(e.runs == () and e.new_first == () for e in entries)


def test_most_added_names_only_commits_after_a_pinned_baseline(tmp_path, cli):
    # c1 slowed its merge by 20% against its own base; pinned at c1, the drift counts the
    # steps after it, and so does "most from": c1's own step is before the baseline
    store = tmp_path / "perf.jsonl"
    assert cli("history", "add", "--history", store, "--each",
               chain(tmp_path, [1.2, 1.03, 1.03, 1.03]), "--base", "main", "--new",
               "merge").code == 0
    document = json.loads(cli("history", "report", "--history", store, "--baseline", "c1",
                              "--format", "json").out)
    for row in document["rows"]:
        named = [m["commit"] for m in row["most"]]
        assert named and set(named) <= {"c2", "c3", "c4"}, named
    # from the first entry's base instead, c1's +20% is counted, and named first
    whole = json.loads(cli("history", "report", "--history", store, "--format", "json").out)
    assert all(row["most"][0]["commit"] == "c1" for row in whole["rows"])


def test_a_gap_in_the_chain_of_bases_is_noted_and_a_chained_entry_is_not(tmp_path, cli):
    parent = chain(tmp_path, [1.0, 1.0, 1.0])
    store = tmp_path / "perf.jsonl"
    for name, base in (("c1", None), ("c2", "c1"), ("c3", "c9")):
        assert cli("history", "add", "--history", store, "--dir", parent / name, "--base",
                   "main", "--new", "merge", "--commit", name,
                   *(("--base-commit", base) if base else ())).code == 0
    notes = json.loads(cli("history", "report", "--history", store, "--format",
                           "json").out)["notes"]
    assert notes == ["c3 was measured against c9, not the entry before it (c2): a change "
                     "between those is not counted"]


def second_entry_changed(tmp_path, cli, commits, **fields):
    """Return a store of `commits` A/A entries whose second line has the given fields."""
    store = tmp_path / "perf.jsonl"
    assert cli("history", "add", "--history", store, "--each", chain(tmp_path, [1.0] * commits),
               "--base", "main", "--new", "merge").code == 0
    lines = store.read_text().splitlines()
    lines[1] = json.dumps({**json.loads(lines[1]), **fields})
    store.write_text("\n".join(lines) + "\n")
    return store


def test_an_entry_of_another_node_is_left_out_unless_node_is_allowed(tmp_path, cli):
    store = second_entry_changed(tmp_path, cli, 3, node="another-host")
    left = json.loads(cli("history", "report", "--history", store, "--format", "json").out)
    assert [(e["commit"], e["why"].split(",")[0]) for e in left["left_out"]] == \
        [("c2", "node another-host")]
    kept = json.loads(cli("history", "report", "--history", store, "--allow-mismatch", "node",
                          "--format", "json").out)
    assert kept["left_out"] == []
    assert [p["commit"] for p in kept["rows"][0]["points"]] == ["c1", "c2", "c3"]


@pytest.mark.parametrize("shift,p_beyond", [(TOLERANCE * 1.5, 0.0), (TOLERANCE / 2, 1.0)])
def test_a_drift_of_no_spread_is_beyond_the_tolerance_for_sure_or_not_at_all(shift, p_beyond):
    # every round the same ratio: no spread, so the drift's p of "worse than the tolerance"
    # is 0 past it and 1 within it, and the gate says so
    base = (10.0,) * 5
    entry = HistoryEntry(commit="c1", base_commit="", branch="main", date="", label="",
                         kind="rounds", source="", verdict="", tolerance_pct=5.0,
                         corpus_sha256="a" * 64, config={}, node="n", node_class="",
                         environment={}, rows=(HistoryRow("sequential", "p50_ms", True, base,
                                                          (10.0 * math.exp(shift),) * 5),))
    report = history_report("store", [entry], TrendSettings())
    assert report.rows[0].p_beyond == p_beyond
    assert report.status == ("fail" if p_beyond == 0.0 else "pass")


def test_a_stored_row_that_is_no_object_is_refused_naming_its_line(tmp_path, cli):
    store = second_entry_changed(tmp_path, cli, 2, rows=[5])
    result = cli("history", "report", "--history", store)
    assert result.code == 2
    assert result.err == (f"router-latency: error: a row is not an object ({store}: line 2: "
                          f"rows)\n")


def test_an_entry_of_pools_is_left_out_of_single_instances_and_named(tmp_path, cli):
    # a folder of pools of 2 a side between folders of one instance a round: unlike, as an
    # entry of other passes is; the single ones compare as every line before pools did
    store = tmp_path / "perf.jsonl"
    history_rounds_folder(tmp_path / "a", 1.0, seed=1)
    as_pools(history_rounds_folder(tmp_path / "b", 1.0, seed=2, start=10000.0), 2)
    history_rounds_folder(tmp_path / "c", 1.0, seed=3, start=20000.0)
    for name in "abc":
        assert cli("history", "add", "--history", store, "--dir", tmp_path / name, "--base",
                   "main", "--new", "merge", "--commit", name).code == 0
    lines = [json.loads(line) for line in store.read_text().splitlines()]
    assert [line["config"].get("instances") for line in lines] == [None, "2", None]
    result = cli("history", "report", "--history", store)
    assert "left out: b: configuration differs (instances '2', not '1')" in result.out
    assert "2 commits like c" in result.out
    # the last entry of pools: the single ones are the unlike
    as_pools(history_rounds_folder(tmp_path / "d", 1.0, seed=4, start=30000.0), 2,
             gpus=["0", "1"])
    assert cli("history", "add", "--history", store, "--dir", tmp_path / "d", "--base",
               "main", "--new", "merge", "--commit", "d").code == 0
    result = cli("history", "report", "--history", store)
    assert "left out: a: configuration differs (instances '1', not '2 on GPUs 0,1')" \
        in result.out
    assert "left out: b: configuration differs (instances '2', not '2 on GPUs 0,1')" \
        in result.out
