"""Tests of record.py: judged rounds folders as a record's sections."""

import json

import pytest

from router_latency.cache import cache_sentence
from router_latency.gate import GateSettings
from router_latency.roundset import Rounds
from router_latency.outcomes import (agreement_sentence, failed_sentence, Outcomes, pass_errors,
                                     round_agreement)
from router_latency.environment import environment_rows, faults_sentence
from router_latency.record import (cached_runs, range_sentences, record_section,
                                   record_sentences, side_ranges, surroundings_sentences,
                                   unlike_sections)
from conftest import three_rounds
from test_pools import as_pools

# its files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


def record_of(tmp_path, **options):
    three_rounds(tmp_path, **options)
    return record_section("s", str(tmp_path), "cpu", "gpu", GateSettings())


def findings_of(section):
    """Return the section's requests (Outcomes) and environment rows, as its report's
    sections were built from them."""
    runs, used = section.runs, section.report.used
    rounds = Rounds(runs, "cpu", "gpu", used)
    agreement = tuple(round_agreement(n, runs[n]["cpu"], runs[n]["gpu"], n in used) for n in runs)
    outcomes = Outcomes(base="cpu", new="gpu", used=used, decisions="gate", agreement=agreement,
                        errors=tuple(pass_errors(rounds)), degraded=(), outcomes=())
    return outcomes, tuple(environment_rows(rounds))


@pytest.mark.parametrize("flagged", [False, True])
def test_the_records_sentences_are_one_function_per_kind(tmp_path, flagged):
    section = record_of(tmp_path, flagged=flagged)
    report = section.report
    ranges = {side: side_ranges(section, side) for side in ("cpu", "gpu")}
    sentences = record_sentences(section)
    ranged = range_sentences(report, ranges)
    outcomes, environment = findings_of(section)
    assert len(ranged) == (0 if flagged else 2)  # flagged: too few rounds for any row
    assert sentences == ranged + [agreement_sentence(outcomes), failed_sentence(outcomes),
                                  faults_sentence(environment)] \
        + surroundings_sentences(report, ranges) + [cache_sentence(cached_runs(section))]
    assert sentences[0 if flagged else 1].startswith(
        "101/101 inputs agreed" if flagged else "Sequential p95 per round: cpu 20.0 ms, gpu ")
    surroundings = dict(s.split(": ", 1) for s in surroundings_sentences(report, ranges))
    assert surroundings["GPU memory"].startswith("gpu ") and "MiB" in surroundings["GPU memory"]
    assert surroundings["other processes on the router's CPUs"] == "not captured"
    assert failed_sentence(outcomes) == "failed requests: none"
    assert cache_sentence(cached_runs(section)).startswith("result caches: none detected")


def test_each_sentence_says_what_its_data_holds(tmp_path):
    section = record_of(tmp_path)
    report = section.report
    outcomes, environment = findings_of(section)
    errors = tuple(e._replace(counts=tuple((n, 2, 3) for n, _, _ in e.counts))
                   for e in outcomes.errors)
    assert failed_sentence(outcomes._replace(errors=errors)) == \
        f"failed requests: cpu {2 * len(report.used) * len(errors)}, " \
        f"gpu {3 * len(report.used) * len(errors)}"
    faulted = tuple(row._replace(faults=2.0) if row.round == report.used[0] else row
                    for row in environment)
    assert faults_sentence(faulted).startswith(
        f"restarts and device faults: r{report.used[0]} ")
    # none seen is said only where the series were read: else not captured, or in how many
    rows = environment
    for faults, said in (([None] * len(rows), "not captured"), ([0.0] * len(rows), "none"),
                         ([0.0] + [None] * (len(rows) - 1),
                          f"none in the 1 of {len(rows)} runs that captured them")):
        read = tuple(row._replace(faults=f) for row, f in zip(rows, faults))
        assert faults_sentence(read) == \
            f"restarts and device faults: {said}"
    disagree = tuple(a._replace(agree=a.total - 1) if a.round == report.used[-1] else a
                     for a in outcomes.agreement)
    assert agreement_sentence(outcomes._replace(agreement=disagree)) == \
        f"decisions agreed in {len(report.used) - 1} of {len(report.used)} rounds; " \
        f"r{report.used[-1]}: {disagree[-1].agree}/{disagree[-1].total}"


def test_sections_of_other_pools_are_said_to_be_measured_unlike(tmp_path, cli):
    for name in ("single", "pooled"):
        (tmp_path / name).mkdir()
        three_rounds(tmp_path / name)
    as_pools(tmp_path / "pooled", 2, gpus=["0", "1"])
    result = cli("record", "--section", f"one={tmp_path / 'single'}", "--section",
                 f"pool={tmp_path / 'pooled'}", "--base", "cpu", "--new", "gpu", "--json",
                 tmp_path / "r.json", "--markdown", tmp_path / "r.md")
    assert result.code in (0, 3), result.err
    lines = (tmp_path / "r.md").read_text().splitlines()
    assert lines[4] == ("The sections were not measured alike: one with one instance a round; "
                        "pool with pools of 2 instances a side on GPUs 0,1. A pool's figures "
                        "are its instances' geometric mean, narrower than one instance's: "
                        "compare a section's figures with another's only where both were "
                        "measured alike.")
    headings = [x for x in lines if x.startswith("`")]
    assert headings[0].endswith(" prompts).") and headings[1].endswith(
        " prompts); pools of 2 instances a side on GPUs 0,1.")
    document = json.loads((tmp_path / "r.json").read_text())
    assert [s["instances"] for s in document["sections"].values()] == ["1", "2 on GPUs 0,1"]
    # alike sections: no such line
    assert not unlike_sections([record_section("a", str(tmp_path / "single"), "cpu", "gpu")] * 2)
