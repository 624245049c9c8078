"""JSON: every figure of a report at full precision."""

from __future__ import annotations

import math
from typing import Optional, Sequence

from .constants import __version__
from .compare import CompareReport
from .gate import composite_text, missed_pct, missed_text
from .rounds import RoundsReport
from .record import RecordSection, section_placement
from .render_text import verdict_line
from .judged import rows_json

__all__ = ["compare_json", "COMPARE_SCHEMA", "record_json", "rounds_json", "ROUNDS_SCHEMA"]


ROUNDS_SCHEMA = "router-latency/rounds/1"
RECORD_SCHEMA = "router-latency/record/1"
COMPARE_SCHEMA = "router-latency/compare/1"


def could_miss_json(report: RoundsReport) -> Optional[dict]:
    """Return the largest slowdown a result that is not a FAIL could have missed: its percent
    (null: no bound) and the sentence; null where nothing was missed."""
    missed = missed_pct(report.outcome)
    if missed is None:
        return None
    return {"pct": missed if math.isfinite(missed) else None,
            "text": missed_text(report.outcome)}


def rounds_json(report: RoundsReport) -> dict:
    """Return the rounds report as a JSON document: everything the text shows."""
    rows = rows_json(report.rows, report.noise)
    test = report.test
    settings = report.settings
    return {"schema": ROUNDS_SCHEMA, "base": report.base, "new": report.new,
            "settings": {**settings._asdict(), "gate": list(settings.gate),
                         "allow_mismatch": list(settings.allow_mismatch),
                         "target_pct": settings.target_pct},
            "tolerance_pct": settings.tolerance_pct,
            "corpus": {"sha256": report.corpus_sha256, "count": report.corpus_count},
            "used": list(report.used),
            "left_out": [item._asdict() for item in report.left_out], "files": report.files,
            "rows": rows,
            "gate_test": None if test is None else {
                "rows": test.rows, "effective_rows": test.effective_rows,
                "composite": None if test.composite is None else test.composite._asdict(),
                "composite_text": None if test.composite is None
                else composite_text(test.composite),
                "composite_p": test.composite_p, "p_tests": "worse than the tolerance",
                "level": test.level,
                "regressions": [{"pass": p, "metric": m} for p, m in test.regressions]},
            "notes": list(report.notes),
            "rule": settings.rule.text,
            "insecure_files": list(report.insecure_files),
            "look": None if report.look is None else report.look._asdict(),
            "config_hashes": {side: list(h) for side, h in report.config_hashes.items()},
            "config_warnings": [w.text for w in report.config_warnings],
            "status": report.status, "reasons": list(report.reasons),
            "verdict": verdict_line(report), "exit_code": report.exit_code,
            "could_miss": could_miss_json(report),
            **{key: value for section in report.sections for key, value in section.json.items()}}


def compare_json(report: CompareReport) -> dict:
    """Return the comparison as a JSON document: everything the text shows, and the status."""
    passes = [{"pass": p.name, "discarded": p.discarded,
               "metrics": {metric: {"a": va, "b": vb,
                                    "diff": vb - va if va is not None and vb is not None
                                    else None,
                                    "ratio": vb / va if va and vb is not None else None}
                           for metric, va, vb in p.figures},
               "errors": {"a": p.errors[0], "b": p.errors[1]},
               **({"degraded": {"a": p.degraded[0], "b": p.degraded[1],
                                "signals": {"a": p.degraded_signals[0],
                                            "b": p.degraded_signals[1]}}}
                  if any(p.degraded) else {}),
               **({"parts": {metric: {"a": va, "b": vb, "diff": vb - va}
                             for metric, va, vb in p.parts}} if p.parts else {})}
              for p in report.passes]
    return {"schema": COMPARE_SCHEMA,
            "a": {"path": report.a_path, "label": report.a_label,
                  "corpus_sha256": report.corpus_sha256[0]},
            "b": {"path": report.b_path, "label": report.b_label,
                  "corpus_sha256": report.corpus_sha256[1]},
            "corpus_count": report.corpus_count, "passes": passes,
            "warnings": [w.text for w in report.warnings],
            "decisions": {"pass": "sequential", "compared": report.compared,
                          "agree": report.compared - len(report.changes),
                          "unmeasured": report.unmeasured,
                          "changes": [{"id": c.id, "a": c.base, "b": c.new, "text": c.text}
                                      for c in report.changes],
                          **({"sampled": {tag: {"inputs": n, "models": list(models)}
                                          for tag, (n, models) in zip("ab", report.sampled)}}
                             if any(n for n, _ in report.sampled) else {})},
            "consistency": {tag: list(ids) for tag, ids, _ in report.consistency},
            "status": report.status, "reasons": list(report.reasons),
            "exit_code": report.exit_code}


def record_json(sections: Sequence[RecordSection]) -> dict:
    """Return the record's JSON: per section the rounds report and every round's raw pass
    summaries and surroundings, as the published record's data file holds them."""
    document: dict = {"schema": RECORD_SCHEMA, "tool": {"name": "router-latency",
                                                        "version": __version__},
                      "sections": {}}
    for section in sections:
        rounds = {f"r{n}": {side: {
            "file": run.path, "label": run.label, "complete": run.complete,
            "started_utc": run.started_utc,
            "host_settings": run.host_settings.to_json() if run.host_settings else {},
            "config_hashes": list(run.config_hashes),
            "passes": [{"name": p.name, "discarded": p.discarded,
                        **{k: v for k, v in p.attempt.to_json(requests=[]).items()
                           if k != "requests"}} for p in run.passes]}
            for side, run in sides.items()} for n, sides in section.runs.items()}
        document["sections"][section.name] = {"folder": section.folder,
                                              "instances": section_placement(section),
                                              "report": rounds_json(section.report),
                                              "rounds": rounds}
    return document
