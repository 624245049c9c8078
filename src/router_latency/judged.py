"""A judged row as every output writes it: its change with the interval its word judges, and
its JSON (the one shape of a row wherever it stands: the rounds table, a pass's parts)."""

from __future__ import annotations

import math
from typing import List, Optional, Sequence

from .constants import LADDER_PASS
from .words import change_text, fmt_value, metric_label
from .report import Section, Table
from .requests import pass_title
from .gate import Row, row_judged_interval, row_word
from .noise import noise_json, NoiseFindings

__all__ = ["pass_cell", "per_round_section", "row_change_text", "row_json", "rows_json"]


def row_change_text(row: Row) -> str:
    """Return a row's change with its interval as every output writes it: -40.6% [-60.9%,
    -9.7%], + worse (for a cost per million requests, the change of the cost): the interval
    its word judges (at a --sequential look, a gated row's is the look's)."""
    judged = row_judged_interval(row)
    if judged is None:
        return change_text(row.speedup, row.speedup_low, row.speedup_high)
    if not all(math.isfinite(v) and v > 0 for v in judged):
        return f"{change_text(row.speedup)} [no bound at this look]"
    return change_text(*judged)


def row_json(row: Row) -> dict:
    """Return a row as JSON, the one shape of a judged row wherever it stands (the rounds
    table, a pass's parts): its figures at full precision."""
    return {"pass": row.pass_name, "metric": row.metric, "gated": row.gated,
            "base_median": row.base_median, "new_median": row.new_median,
            "diff": {"mean": row.diff.mean, "low": row.diff.low, "high": row.diff.high,
                     "df": row.diff.df, "confidence": 0.95},
            "log_ratio": row.log_ratio._asdict(), "change_pct": row.change_pct,
            "speedup": row.speedup, "speedup_low": row.speedup_low,
            "speedup_high": row.speedup_high, "change_text": row_change_text(row),
            "worse_rounds": row.worse_rounds,
            "rounds": row.rounds, "p_value": row.p_value,
            "detectable_pct": row.detectable_pct, "rounds_needed": row.rounds_needed,
            # an undecided row's further rounds that decide it 80% of the time (the report's
            # more_rounds is the most of these); null when decided, or past 1,000
            "more_rounds": row.rounds_to_go, "worse_end_pct": row.worse_end_pct,
            "verdict": row.verdict, "word": row_word(row),
            "held_by_holm": row.held_by_holm,
            "judged_interval_pct": None if row.judged is None else [
                100 * math.expm1(v) if math.isfinite(v) else None
                for v in (row.judged.low, row.judged.high)],
            "base_values": list(row.base_values),
            "new_values": list(row.new_values)}


def pass_cell(row: Row, rows: Sequence[Row]) -> str:
    """Return the pass column of a row: its pass's title on the pass's first row."""
    first = row.metric == "p50_ms" or (row.pass_name == LADDER_PASS and next(
        r for r in rows if r.pass_name == LADDER_PASS) is row)
    return pass_title(row.pass_name) if first else ""


def per_round_table(rows: Sequence[Row], used: Sequence[int], base: str, new: str) -> Table:
    """Return the table of each round's base / new values of every row."""
    header = ["pass", "metric"] + [f"r{n} {base} / {new}" for n in used]
    per = [[pass_cell(r, rows), metric_label(r.metric)]
           + [f"{fmt_value(b)} / {fmt_value(n)}" for b, n in zip(r.base_values, r.new_values)]
           for r in rows]
    return Table("", header, per, [False, False] + [True] * len(used))


def per_round_section(rows: Sequence[Row], used: Sequence[int], base: str, new: str) -> Section:
    """Return each round's values of every row as the report's section, drawn on request
    (--per-round): in text right below the gated table, in Markdown in its order."""
    return Section(key="per_round", title="Each round", beside_table=True, on_request=True,
                   blocks=(per_round_table(rows, used, base, new),) if rows else ())


def rows_json(rows: Sequence[Row], noise: Optional[NoiseFindings]) -> List[dict]:
    """Return judged rows as JSON, each with its spread taken apart (noise_json)."""
    return [{**row_json(row), "noise": noise_json(noise, row)} for row in rows]
