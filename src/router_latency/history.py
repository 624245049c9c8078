"""The history across commits: a store of judged rounds folders (one JSON line each) and the
trend of every gated row, its cumulative change from a pinned baseline with a propagated
interval, the change points (Holm over the steps) and the drift gate (docs/history.md): both
decided by the gate's rule (gate.py: its one-sided tests, Holm's step-down, the words, the
status and exit code), on intervals that each have their own degrees of freedom."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .constants import __version__, NamedTuple, ROW_METRICS
from .errors import file_number, RouterLatencyError
from .words import metric_title, pct_text, plural, worse_sign
from .stats import mean_interval, t_cdf, t_ppf
from .files import locked_append, parse_json, read_bytes
from .runfile import load_run, RunFile
from .requests import pass_title
from .gate import (crosses, GATE_ALPHA, GateOutcome, GateSettings, holm_step_down,
                   judged_word, one_sided, OneSided, outcome_of, upper_critical, word_status)
from .pools import SINGLE_PLACEMENT
from .rounds import run_signature
from .record import record_section

__all__ = [
    "add_entries", "Change", "EntryTags", "entry_of_folder", "entry_of_run",
    "folders_oldest_first", "HISTORY_SCHEMA", "history_report", "HistoryReport", "LIKE_FIELDS",
    "history_change_text", "read_history", "RowTrend", "TrendPoint",
    "TrendSettings",
]


HISTORY_SCHEMA = "router-latency-history/1"  # a line of another major version is refused
LIKE_FIELDS = ("corpus", "node", "config")  # what history report --allow-mismatch accepts
MOST_NAMED = 3  # the commits a drift's report names, the largest steps first


class HistoryRow(NamedTuple):
    """One pass and metric of an entry: each used round's value of either side."""
    pass_name: str
    metric: str
    gated: bool
    base_values: Tuple[float, ...]  # empty for a single run
    new_values: Tuple[float, ...]


class HistoryEntry(NamedTuple):
    """One line of the store: a judged rounds folder (kind "rounds") or a single run ("run")
    recorded under a commit."""
    commit: str
    base_commit: str  # the commit the base side ran; "" when not told
    branch: str
    date: str  # ISO 8601, UTC
    label: str
    kind: str  # rounds or run
    source: str  # the folder or file it was read from
    verdict: str  # the rounds gate's status; "" for a run
    tolerance_pct: float
    corpus_sha256: str
    config: Dict[str, str]  # the run signature and the new side's x-vsr-config-hash, as text
    node: str  # the host name the runs recorded
    node_class: str  # as told (--node-class); "" when not
    environment: Dict[str, str]  # cpu model, kernel, python, tool of the first base run
    rows: Tuple[HistoryRow, ...]
    line: int = 0  # its line in the store; not written
    # the sha256 of each run file it measured: a file in two entries is refused (add_entries)
    runs: Tuple[str, ...] = ()
    # per used round, in the rows' order: whether the new side ran first (the step is then
    # corrected for the cost of running second); () where not known (a run, an old line)
    new_first: Tuple[bool, ...] = ()


def history_now() -> str:
    import datetime
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def environment_of(run: RunFile) -> Dict[str, str]:
    """Return the environment summary of a run: its host's settings and tool, as text."""
    found = {"host": run.host, "python": run.python,
             "tool": str(run.tool.get("version", ""))}
    if run.host_settings is not None:
        found.update({key: value for key in ("cpu_model", "kernel")
                      for value in [getattr(run.host_settings, key)] if value})
    return {key: value for key, value in found.items() if value}


def config_of(run: RunFile, config_hashes: Sequence[str]) -> Dict[str, str]:
    """Return what 'configuration' means for like with like: how the runs were measured
    (run_signature without the corpus and tool version) and the router's configuration hash."""
    signature = {key: str(value) for key, value in run_signature(run).items()
                 if key not in ("corpus", "tool")}
    signature["config_hash"] = " ".join(config_hashes)
    # one instance a round is what every line before pools holds: written only for pools
    if signature["instances"] == SINGLE_PLACEMENT:
        del signature["instances"]
    return signature


def config_value(config: Dict[str, str], key: str) -> Optional[str]:
    """Return a configuration's value of `key`; a line without "instances" measured one
    instance a round."""
    return config.get(key, SINGLE_PLACEMENT if key == "instances" else None)


class EntryTags(NamedTuple):
    """What history add records an entry under, as told on the command line."""
    commit: str
    base_commit: str = ""
    branch: str = ""
    date: str = ""  # "" : the first run's start
    label: str = ""
    node_class: str = ""


def entry_of_folder(folder: str, base: str, new: str, tags: EntryTags,
                    settings: GateSettings) -> HistoryEntry:
    """Return the entry of a rounds folder, judged as `rounds` judges it."""
    section = record_section(tags.commit, folder, base, new, settings)
    report, runs = section.report, section.runs
    if not report.rows:
        raise RouterLatencyError(f"no usable rows ({'; '.join(report.outcome.reasons)})",
                                 folder)
    first = runs[min(runs)][base]
    rows = tuple(HistoryRow(r.pass_name, r.metric, r.gated, r.base_values, r.new_values)
                 for r in report.rows if r.metric in ROW_METRICS)
    starts = [(runs[n][base].started_unix, runs[n][new].started_unix) for n in report.used]
    new_first = () if any(b is None or n is None for b, n in starts) else \
        tuple(n < b for b, n in starts if b is not None and n is not None)
    return HistoryEntry(
        commit=tags.commit, base_commit=tags.base_commit, branch=tags.branch,
        date=tags.date or first.started_utc or history_now(), label=tags.label, kind="rounds",
        source=folder, verdict=report.outcome.status, tolerance_pct=settings.tolerance_pct,
        corpus_sha256=report.corpus_sha256,
        config=config_of(first, report.config_hashes.get(new, ())), node=first.host,
        node_class=tags.node_class, environment=environment_of(first), rows=rows,
        runs=tuple(sorted(file_digest(r.path) for n in runs for r in runs[n].values())),
        new_first=new_first)


def file_digest(path: str) -> str:
    """Return the sha256 of a file's bytes, in hex."""
    import hashlib
    return hashlib.sha256(read_bytes(path)).hexdigest()


def entry_of_run(path: str, tags: EntryTags) -> HistoryEntry:
    """Return the entry of a single run: a level for the series, no paired step."""
    run = load_run(path)
    # a figure the store's reader refuses (a req/s of 0.0: ok over wall seconds, rounded to
    # 0.01) is no level: left out, not written for every later command to refuse
    rows = tuple(HistoryRow(p.name, metric, metric in ("p50_ms", "p95_ms", "req_per_s"), (),
                            (float(getattr(p.summary, metric)),))
                 for p in sorted(run.passes, key=lambda p: p.order)
                 if not p.discarded and p.summary is not None and p.measured.ok
                 for metric in ROW_METRICS
                 if file_number(getattr(p.summary, metric), positive=True) is not None)
    return HistoryEntry(
        commit=tags.commit, base_commit=tags.base_commit, branch=tags.branch,
        date=tags.date or run.started_utc or history_now(), label=tags.label, kind="run",
        source=path, verdict="", tolerance_pct=5.0, corpus_sha256=run.corpus_sha256,
        config=config_of(run, run.config_hashes), node=run.host, node_class=tags.node_class,
        environment=environment_of(run), rows=rows, runs=(file_digest(path),))


def folders_oldest_first(parent: str, base: str) -> List[str]:
    """Return the rounds folders in parent (those holding r<N>-<base>.json files), the oldest
    first by their first round's start, then by name."""
    top = Path(parent)
    if not top.is_dir():
        raise RouterLatencyError("no such folder" if not top.exists() else "not a folder",
                                 parent)
    found = []
    for folder in sorted(p for p in top.iterdir() if p.is_dir()):
        files = sorted(folder.glob(f"r*-{base}.json"))
        if files:
            run = load_run(str(files[0]))
            found.append((run.started_unix if run.started_unix is not None else math.inf,
                          run.started_utc, folder.name, str(folder)))
    if not found:
        raise RouterLatencyError(f"no folder of r<N>-{base}.json files in it", parent)
    return [path for *_, path in sorted(found)]


def entry_json(entry: HistoryEntry) -> Dict[str, object]:
    """Return an entry as its line's object, the schema first."""
    document: Dict[str, object] = {"schema": HISTORY_SCHEMA, "written_by": __version__,
                                   "added_utc": history_now()}
    document.update({key: value for key, value in entry._asdict().items()
                     if key not in ("rows", "line", "runs", "new_first")})
    document["rows"] = [row._asdict() for row in entry.rows]
    # added within schema version 1: a line without them (an older store) still reads
    document["runs"] = list(entry.runs)
    document["new_first"] = list(entry.new_first)
    return document


def entry_line(entry: HistoryEntry) -> bytes:
    return (json.dumps(entry_json(entry), ensure_ascii=False, allow_nan=False,
                       separators=(",", ":")) + "\n").encode("utf-8")


def add_entries(store: str, entries: Sequence[HistoryEntry],
                wait_s: Optional[float] = None) -> None:
    """Append entries to the store, all or none, as whole lines in one write under the
    store's lock (files.locked_append: adds at once on one machine take turns, none lost);
    the old lines are kept byte for byte. Refused: a commit already in the store, a run file
    already in it (a measurement counts once), a step that overlaps the series' steps
    (overlap_text), and an entry whose line the store's reader would refuse (checked by that
    reader)."""
    new_lines = b"".join(checked_line(entry) for entry in entries)

    def lines_of(old: bytes) -> bytes:
        present = parse_history(old, store)
        known = {e.commit: e.line for e in present}
        measured = {digest: e for e in present for digest in e.runs}
        for entry in entries:
            series = [e for e in present if e.kind == "rounds"
                      and (e.branch, e.label) == (entry.branch, entry.label)]
            if entry.commit in known:
                raise RouterLatencyError(f"commit {entry.commit} is already in the history "
                                         f"(line {known[entry.commit]})", store)
            for digest in entry.runs:
                if digest in measured:
                    other = measured[digest]
                    where = f"line {other.line}" if other.line else "this addition"
                    raise RouterLatencyError(
                        f"{entry.source}: a run file of it (sha256 {digest[:12]}) is already "
                        f"in the history under commit {other.commit} ({where}): a measurement "
                        f"counts once", store)
            overlap = overlap_text(entry, series)
            if overlap:
                raise RouterLatencyError(overlap, store)
            known[entry.commit] = 0
            measured.update({digest: entry._replace(line=0) for digest in entry.runs})
            present.append(entry._replace(line=0))
        return b"\n" + new_lines if old and not old.endswith(b"\n") else new_lines
    locked_append(store, lines_of, wait_s)


def checked_line(entry: HistoryEntry) -> bytes:
    """Return an entry's line once the store's reader takes it: what `history add` writes,
    every later `history report` and `history add` reads."""
    line = entry_line(entry)
    where = f"{entry.source}: its history line"
    entry_from_json(parse_json(line, where), where)
    return line


def overlap_text(entry: HistoryEntry, series: Sequence[HistoryEntry]) -> str:
    """Return why an entry's step would overlap the store's ("" where it does not): a rounds
    folder whose base ran an earlier commit of its series (its branch and label's rounds
    entries) than the previous entry's, or the previous entry's own base, measures again
    what the steps since its base measured, and the drift would count it twice. Refused, not
    placed on a graph: measure it against the previous entry's commit. A base the series
    does not hold is a gap (not counted), as before."""
    if entry.kind != "rounds" or not series or not entry.base_commit:
        return ""
    previous = series[-1]
    earlier = {e.commit for e in series[:-1]} | {previous.base_commit} - {""}
    if entry.base_commit == previous.commit or entry.base_commit not in earlier:
        return ""
    return (f"{entry.source}: its base ran commit {entry.base_commit}, not the previous "
            f"entry's {previous.commit}: its step overlaps the steps since "
            f"{entry.base_commit} and the drift would count them twice; measure it against "
            f"{previous.commit}")


def read_history(store: str) -> List[HistoryEntry]:
    """Return the entries of a store in the order added."""
    return parse_history(read_bytes(store), store)


def parse_history(data: bytes, store: str) -> List[HistoryEntry]:
    entries = []
    for number, text in enumerate(data.split(b"\n"), 1):
        if text.strip():
            entries.append(entry_from_json(parse_json(text, f"{store}: line {number}"),
                                           f"{store}: line {number}"))
            entries[-1] = entries[-1]._replace(line=number)
    return entries


def text_field(document: Dict[str, object], key: str, where: str) -> str:
    value = document.get(key)
    if not isinstance(value, str):
        raise RouterLatencyError(f"{key} is missing or not text", where)
    return value


def list_field(document: Dict[str, object], key: str, where: str) -> List[object]:
    value = document.get(key)
    if not isinstance(value, list):
        raise RouterLatencyError(f"{key} is missing or not a list", where)
    return value


def texts_of(document: Dict[str, object], key: str, where: str) -> Dict[str, str]:
    value = document.get(key)
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise RouterLatencyError(f"{key} is missing or not an object of texts", where)
    return {str(k): str(v) for k, v in value.items()}


def positive_numbers(values: List[object], where: str) -> Tuple[float, ...]:
    if not all(file_number(v, positive=True) is not None for v in values):
        raise RouterLatencyError("a row's values are not all positive numbers", where)
    return tuple(float(v) for v in values if isinstance(v, (int, float)))


def row_from_json(raw: object, where: str) -> HistoryRow:
    if not isinstance(raw, dict):
        raise RouterLatencyError("a row is not an object", where)
    base, new = (positive_numbers(list_field(raw, key, where), where)
                 for key in ("base_values", "new_values"))
    if not new or base and len(base) != len(new):
        raise RouterLatencyError("a row's base and new values are not paired", where)
    if not isinstance(raw.get("gated"), bool):
        raise RouterLatencyError("gated is missing or not true or false", where)
    return HistoryRow(text_field(raw, "pass_name", where), text_field(raw, "metric", where),
                      bool(raw["gated"]), base, new)


def entry_from_json(document: object, where: str) -> HistoryEntry:
    """Return the entry of one line: a line of this major version, fields it does not know
    ignored (a later minor version may add some); another major version is refused."""
    if not isinstance(document, dict) or not isinstance(document.get("schema"), str):
        raise RouterLatencyError("not a history line (no schema)", where)
    name, _, version = str(document["schema"]).rpartition("/")
    ours = HISTORY_SCHEMA.rpartition("/")
    if name != ours[0]:
        raise RouterLatencyError(f"schema {document['schema']!r}, not {HISTORY_SCHEMA}", where)
    if version != ours[2]:
        raise RouterLatencyError(f"schema {document['schema']!r}: written by another major "
                                 f"version; this one reads {HISTORY_SCHEMA}", where)
    texts = {key: text_field(document, key, where) for key in (
        "commit", "base_commit", "branch", "date", "label", "kind", "source", "verdict",
        "corpus_sha256", "node", "node_class")}
    if not texts["commit"] or texts["kind"] not in ("rounds", "run"):
        raise RouterLatencyError("commit is empty or kind is not rounds or run", where)
    tolerance = document.get("tolerance_pct")
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool):
        raise RouterLatencyError("tolerance_pct is missing or not a number", where)
    return HistoryEntry(
        commit=texts["commit"], base_commit=texts["base_commit"], branch=texts["branch"],
        date=texts["date"], label=texts["label"], kind=texts["kind"], source=texts["source"],
        verdict=texts["verdict"], corpus_sha256=texts["corpus_sha256"], node=texts["node"],
        node_class=texts["node_class"], tolerance_pct=float(tolerance),
        config=texts_of(document, "config", where),
        environment=texts_of(document, "environment", where),
        rows=tuple(row_from_json(r, f"{where}: rows")
                   for r in list_field(document, "rows", where)),
        runs=tuple(str(d) for d in optional_list(document, "runs", where)),
        new_first=tuple(bool(v) for v in optional_list(document, "new_first", where)))


def optional_list(document: Dict[str, object], key: str, where: str) -> List[object]:
    """Return a list field added within this schema version: [] where an older line has
    none."""
    return list_field(document, key, where) if key in document else []


# ----- the trend ---------------------------------------------------------------------------

class Change(NamedTuple):
    """A change in the worse direction, as a log ratio, with its 95% interval: the one the
    gate judges, each end at its one-sided level GATE_ALPHA / 2."""
    mean: float
    low: float
    high: float
    variance: float  # of the mean
    df: float  # Welch-Satterthwaite for a sum

    @property
    def half(self) -> float:
        return (self.high - self.low) / 2


def change_of(mean: float, variance: float, df: float) -> Change:
    half = -t_ppf(GATE_ALPHA / 2, df) * math.sqrt(variance) if variance > 0 else 0.0
    return Change(mean, mean - half, mean + half, variance, df)


def step_of(row: HistoryRow, new_first: Sequence[bool] = ()) -> Optional[Change]:
    """Return an entry's paired step of a row: the mean over rounds of the worse-direction
    log ratio new/base, with the variance of that mean (s^2 / n) and n - 1 df; where the
    rounds' start order is known and both orders ran, the mean of the two orders' means
    (balanced_step), so that a cost of running second, which an odd number of rounds leaves
    in the plain mean with the same sign every commit, cancels."""
    if len(row.base_values) < 2:
        return None
    sign = worse_sign(row.metric)
    logs = [sign * math.log(n / b) for b, n in zip(row.base_values, row.new_values)]
    if len(new_first) == len(logs):
        balanced = balanced_step(logs, new_first)
        if balanced is not None:
            return balanced
    interval = mean_interval(logs)
    variance = ((interval.high - interval.mean) / -t_ppf(GATE_ALPHA / 2, interval.df)) ** 2
    return Change(interval.mean, interval.low, interval.high, variance, float(interval.df))


def balanced_step(logs: Sequence[float], new_first: Sequence[bool]) -> Optional[Change]:
    """Return the mean of the two start orders' mean log ratios, with its variance from the
    pooled spread within the orders (n - 2 df): the crossover estimate of the step; None
    where one order is missing or no df is left."""
    groups = [[v for v, first in zip(logs, new_first) if first == side] for side in (False, True)]
    if any(not g for g in groups) or len(logs) < 3:
        return None
    means = [math.fsum(g) / len(g) for g in groups]
    squares = math.fsum((v - m) ** 2 for g, m in zip(groups, means) for v in g)
    df = len(logs) - 2
    variance = squares / df / 4 * (1 / len(groups[0]) + 1 / len(groups[1]))
    return change_of((means[0] + means[1]) / 2, variance, float(df))


def sum_of(steps: Sequence[Change]) -> Change:
    """Return the sum of independent steps: variances add, df by Welch-Satterthwaite."""
    variance = math.fsum(s.variance for s in steps)
    spread = math.fsum(s.variance ** 2 / s.df for s in steps)
    df = variance ** 2 / spread if spread > 0 else math.fsum(s.df for s in steps)
    return change_of(math.fsum(s.mean for s in steps), variance, max(df, 1.0))


def change_points(steps: Sequence[Change]) -> Tuple[bool, ...]:
    """Return which steps are shown non-zero: each one's two-sided test against no change at
    the gate's GATE_ALPHA, its |t| against the one-sided critical at half of it, with the
    gate's Holm step-down over the series' steps."""
    tests = [one_sided(abs(s.mean), math.sqrt(s.variance), s.df) for s in steps]
    return holm_step_down(tests, GATE_ALPHA / 2).rejected


def beyond_test(drift: Optional[Change], tolerance_log: float) -> OneSided:
    """Return the gate's one-sided test of "the drift is worse than the tolerance" on the
    drift's own df; no drift never rejects."""
    if drift is None:
        return OneSided(-math.inf, 1.0)
    return one_sided(drift.mean - tolerance_log, math.sqrt(drift.variance), drift.df)


def report_level(report: int) -> float:
    """Return the one-sided level the drift gate's FAIL spends at the `report`-th report since
    the baseline (report k: the drift over the first k paired steps after it): GATE_ALPHA / 2
    times 1 / (k (k + 1)), which sum to GATE_ALPHA / 2 over any number of reports (1/k -
    1/(k + 1) telescopes). A report after every entry tests every drift since the baseline
    again; by the union bound a drift at the tolerance fails at some report of the series in at
    most GATE_ALPHA / 2 of series, however many reports are made and however they correlate
    (at 2.5% each, a series of six reports failed in 9.7%)."""
    return GATE_ALPHA / 2 / (report * (report + 1)) if report > 0 else GATE_ALPHA / 2


def drift_statuses(drifts: Sequence[Optional[Change]], tolerance_log: float,
                   report: int = 1) -> List[str]:
    """Return each row's status by the gate's rule: fail when Holm's step-down of the drifts'
    one-sided tests (family-wise report_level(report), the report's share of the series'
    GATE_ALPHA / 2) shows it worse than the tolerance, pass when its 95% interval lies within
    it (its word is better, same or no worse), inconclusive otherwise or without a drift."""
    worse = holm_step_down([beyond_test(d, tolerance_log) for d in drifts],
                           report_level(report)).rejected
    return [word_status(judged_word(d.low, d.high, tolerance_log, fail))
            if d is not None else "inconclusive" for d, fail in zip(drifts, worse)]


def beyond_p(drift: Change, tolerance_log: float) -> float:
    """Return the one-sided p-value of 'the drift is worse than the tolerance', as reported
    (the gate decides by beyond_test)."""
    if drift.variance == 0:
        return 0.0 if drift.mean > tolerance_log else 1.0
    return t_cdf(-(drift.mean - tolerance_log) / math.sqrt(drift.variance), drift.df)


class TrendPoint(NamedTuple):
    """One entry of a row's series."""
    commit: str
    label: str
    date: str
    kind: str  # rounds or run
    verdict: str  # the entry's own rounds gate; "" for a run
    level: float  # the new side's geometric mean over rounds (a run: its value)
    level_low: Optional[float]  # its 95% interval; None for a run
    level_high: Optional[float]
    step: Optional[Change]  # the paired change against its base; None for a run
    cumulative: Optional[Change]  # from the baseline; None before it
    change_point: bool = False  # its step is shown non-zero (Holm over the series' steps)


class RowTrend(NamedTuple):
    """A gated row over the commits: its series, the drift from the baseline and its word."""
    pass_name: str
    metric: str
    points: Tuple[TrendPoint, ...]
    drift: Optional[Change]  # the last point's cumulative change; None: no step after it
    p_beyond: float  # one-sided: the drift is worse than the tolerance
    status: str  # fail, pass or inconclusive
    most: Tuple[Tuple[str, float], ...]  # (commit, its worse-direction step), largest first
    # inconclusive with its interval wholly past the tolerance: Holm's correction for the
    # rows, not the interval shown, held it back (the rounds table's "inconclusive (Holm)")
    held_by_holm: bool = False
    steps: int = 0  # paired steps the drift sums: this report is the steps-th since the baseline

    @property
    def title(self) -> str:
        return f"{pass_title(self.pass_name)} {metric_title(self.metric)}"


class HistoryReport(NamedTuple):
    """The trend report of a store, and the drift gate's outcome."""
    store: str
    baseline: str  # what the drift is counted from, in words
    reference: str  # the commit whose corpus, node and configuration the others share
    tolerance_pct: float
    rows: Tuple[RowTrend, ...]
    left_out: Tuple[Tuple[str, str], ...]  # (commit, why)
    notes: Tuple[str, ...]
    outcome: GateOutcome  # the drift gate's, by the gate's rule
    # the report's place in the series since the baseline (the most paired steps a gated
    # row's drift sums) and the one-sided level its FAIL spends (report_level)
    report: int = 1
    fail_level: float = GATE_ALPHA / 2

    @property
    def status(self) -> str:
        return self.outcome.status

    @property
    def reasons(self) -> Tuple[str, ...]:
        return self.outcome.reasons

    @property
    def exit_code(self) -> int:
        return self.outcome.exit_code


class TrendSettings(NamedTuple):
    """How history report reads a store."""
    baseline: Optional[str] = None  # a commit (or a prefix of 4 or more), or a label
    tolerance_pct: float = 5.0
    branch: Optional[str] = None  # only entries of this branch
    allow_mismatch: Tuple[str, ...] = ()  # of LIKE_FIELDS


def unlike(entry: HistoryEntry, reference: HistoryEntry, allowed: Sequence[str]) -> str:
    """Return why an entry is not like the reference; '' when it is."""
    why = []
    if "corpus" not in allowed and entry.corpus_sha256 != reference.corpus_sha256:
        why.append(f"corpus {entry.corpus_sha256[:12]}, not {reference.corpus_sha256[:12]}")
    node, other = ((entry.node_class, reference.node_class)
                   if entry.node_class and reference.node_class
                   else (entry.node, reference.node))
    if "node" not in allowed and node != other:
        why.append(f"node {node or '(none)'}, not {other or '(none)'}")
    keys = sorted(k for k in set(entry.config) | set(reference.config)
                  if config_value(entry.config, k) != config_value(reference.config, k))
    if "config" not in allowed and keys:
        why.append("configuration differs (" + ", ".join(
            f"{k} {config_value(entry.config, k)!r}, not {config_value(reference.config, k)!r}"
            for k in keys) + ")")
    return "; ".join(why)


class Selection(NamedTuple):
    entries: List[HistoryEntry]
    left_out: List[Tuple[str, str]]
    notes: List[str]


def like_entries(entries: Sequence[HistoryEntry], settings: TrendSettings) -> Selection:
    """Return the entries like the last one (same corpus, node or node class, configuration,
    unless allowed), those left out and why, and the gaps in the chain of bases."""
    left_out: List[Tuple[str, str]] = []
    if settings.branch is not None:
        left_out = [(e.commit, f"branch {e.branch or '(none)'}") for e in entries
                    if e.branch != settings.branch]
        entries = [e for e in entries if e.branch == settings.branch]
    if not entries:
        raise RouterLatencyError("the history holds no entry"
                                 + (f" of branch {settings.branch}" if settings.branch else ""))
    reference = entries[-1]
    kept = []
    for entry in entries:
        why = unlike(entry, reference, settings.allow_mismatch)
        if why:
            left_out.append((entry.commit, why))
        else:
            kept.append(entry)
    notes = [f"{e.commit}: a single run, a level in the series without a paired step; the "
             f"drift does not count it" for e in kept if e.kind == "run"]
    for before, entry in zip(kept, kept[1:]):
        if entry.base_commit and entry.base_commit != before.commit:
            notes.append(f"{entry.commit} was measured against {entry.base_commit}, not the "
                         f"entry before it ({before.commit}): a change between those is "
                         f"not counted")
    return Selection(kept, left_out, notes)


def baseline_index(entries: Sequence[HistoryEntry], wanted: Optional[str],
                   left_out: Sequence[Tuple[str, str]]) -> int:
    """Return the index of the baseline entry, -1 for the first entry's base (the default)."""
    if wanted is None:
        return -1
    matches = [i for i, e in enumerate(entries) if wanted in (e.commit, e.label)
               or len(wanted) >= 4 and e.commit.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise RouterLatencyError(f"{wanted} names {len(matches)} entries: give more of the "
                                 f"commit", "--baseline")
    why = [w for c, w in left_out if c == wanted or len(wanted) >= 4 and c.startswith(wanted)]
    raise RouterLatencyError(f"{wanted} is left out ({why[0]})" if why else
                             f"no entry of commit or label {wanted}", "--baseline")


def row_points(entries: Sequence[HistoryEntry], key: Tuple[str, str],
               start: int) -> List[TrendPoint]:
    """Return a row's points, their steps, and the cumulative change from entry `start`
    (-1: from the first entry's base) where the entry has the row."""
    points: List[TrendPoint] = []
    steps: List[Change] = []
    for index, entry in enumerate(entries):
        row = next((r for r in entry.rows if (r.pass_name, r.metric) == key), None)
        if row is None:
            continue
        step = step_of(row, entry.new_first)
        if index > start and step is not None:
            steps.append(step)
        logs = [math.log(v) for v in row.new_values]
        level = mean_interval(logs) if len(logs) > 1 else None
        cumulative = (sum_of(steps) if steps else change_of(0.0, 0.0, 1.0)) \
            if index >= start else None
        points.append(TrendPoint(
            commit=entry.commit, label=entry.label, date=entry.date, kind=entry.kind,
            verdict=entry.verdict, level=math.exp(math.fsum(logs) / len(logs)),
            level_low=math.exp(level.low) if level else None,
            level_high=math.exp(level.high) if level else None, step=step,
            cumulative=cumulative))
    marks = iter(change_points([p.step for p in points if p.step is not None]))
    return [p._replace(change_point=next(marks)) if p.step is not None else p for p in points]


def most_added(points: Sequence[TrendPoint], start_commit: Optional[str]) -> \
        Tuple[Tuple[str, float], ...]:
    """Return the commits whose steps after the baseline added most, largest first."""
    after = [p for p in points if p.cumulative is not None and p.step is not None
             and p.commit != start_commit and p.step.mean > 0]
    return tuple((p.commit, p.step.mean) for p in
                 sorted(after, key=lambda p: -p.step.mean if p.step else 0.0)[:MOST_NAMED]
                 if p.step is not None)


def history_report(store: str, entries: Sequence[HistoryEntry],
                   settings: TrendSettings) -> HistoryReport:
    """Return the trend of every gated row of the last entry over the entries like it, and
    the drift gate, by the gate's rule (drift_statuses, drift_outcome): fail when a row's
    drift is shown worse than the tolerance (Holm over the rows, family-wise 2.5% one-sided),
    pass when every row's 95% interval lies within it, inconclusive otherwise."""
    selection = like_entries(entries, settings)
    kept = selection.entries
    start = baseline_index(kept, settings.baseline, selection.left_out)
    baseline = (f"{kept[start].commit}" + (f" ({kept[start].label})" if kept[start].label
                                           else "")) if start >= 0 else \
        (kept[0].base_commit or f"the base of {kept[0].commit}")
    tolerance = math.log1p(settings.tolerance_pct / 100)
    keys = [(r.pass_name, r.metric) for r in kept[-1].rows if r.gated]
    rows = []
    for key in keys:
        points = row_points(kept, key, start)
        counted = [p for p in points if p.cumulative is not None and p.step is not None
                   and (start < 0 or p.commit != kept[start].commit)]
        drift = points[-1].cumulative if counted else None
        rows.append(RowTrend(key[0], key[1], tuple(points), drift,
                             beyond_p(drift, tolerance) if drift else 1.0, "inconclusive",
                             most_added(points, kept[start].commit if start >= 0 else None),
                             steps=len(counted)))
    report = max([r.steps for r in rows] + [1])
    level = report_level(report)
    rows = [r._replace(status=status, held_by_holm=status == "inconclusive"
                       and r.drift is not None and r.drift.low > tolerance
                       and crosses(beyond_test(r.drift, tolerance).statistic,
                                   upper_critical(level, r.drift.df)))
            for r, status in zip(rows, drift_statuses([r.drift for r in rows], tolerance,
                                                      report))]
    return HistoryReport(
        store=store, baseline=baseline, reference=kept[-1].commit,
        tolerance_pct=settings.tolerance_pct, rows=tuple(rows),
        left_out=tuple(selection.left_out), notes=tuple(selection.notes),
        outcome=drift_outcome(rows, baseline, settings.tolerance_pct, report),
        report=report, fail_level=report_level(report))


def pct(log_value: float) -> str:
    return pct_text(math.expm1(log_value))


def history_change_text(change: Change) -> str:
    """Return a change with its interval, +15.2% [+9.8%, +20.9%], in the one form every change
    is written in (+ slower; for req/s, of the time per request): its worse direction."""
    return f"{pct(change.mean)} [{pct(change.low)}, {pct(change.high)}]"


def drift_text(row: RowTrend) -> str:
    """Return a row's drift with its interval, as every change is written (for req/s, of the
    time per request)."""
    return "no step" if row.drift is None else history_change_text(row.drift)


def drift_outcome(rows: Sequence[RowTrend], baseline: str, tolerance_pct: float,
                  report: int = 1) -> GateOutcome:
    """Return the drift gate's outcome, its status and exit code the gate's (outcome_of): the
    rows that failed, else those undecided, as its reasons, the commits that added most
    named; a pass says what it showed."""
    if not rows:
        return outcome_of((), ["the last entry has no gated row"])
    failures, doubts = [], []
    for row in rows:
        most = ", ".join(f"{c} ({pct(v)})" for c, v in row.most)
        if row.status == "fail":
            failures.append(f"{row.title} drifted {drift_text(row)} since {baseline}, worse "
                            f"than the {tolerance_pct:g}% tolerance; most from {most}")
        elif row.status == "inconclusive":
            held = (row.drift is not None
                    and row.drift.low > math.log1p(tolerance_pct / 100))
            doubts.append(f"{row.title} " + (
                f"has no paired step after {baseline}" if row.drift is None else
                f"drifted {drift_text(row)} since {baseline}: " + (
                    f"its interval lies beyond the {tolerance_pct:g}% tolerance, but Holm's "
                    f"correction for the {len(rows)} rows does not show it worse"
                    if row.held_by_holm else
                    f"beyond the {tolerance_pct:g}% tolerance at one report's "
                    f"{GATE_ALPHA / 2:.1%}, not at report {report}'s share of the series' "
                    f"{GATE_ALPHA / 2:.1%} ({report_level(report):.2%} one-sided: "
                    f"docs/history.md, repeated reports)" if held else
                    f"not shown within the {tolerance_pct:g}% tolerance")
                + (f"; most from {most}" if most else "")))
    outcome = outcome_of(failures, doubts)
    if outcome.status != "pass":
        return outcome
    return outcome._replace(reasons=(f"{plural(len(rows), 'gated row')} shown within the "
                                     f"{tolerance_pct:g}% tolerance since {baseline}",))
