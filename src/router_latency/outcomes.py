"""What each side's requests came to, round by round: decision agreement, failed and degraded
requests per pass, expected rejections, surprises, sampled selections; and their section."""

from __future__ import annotations

from typing import Dict, List, Tuple

from .constants import NamedTuple, ROUTER_MAX_CONCURRENCY
from .words import failure_text, plural, shown_decision
from .report import Check, Lines, Panel, Section, Table
from .degraded import degraded_answers_line
from .runfile import RunFile
from .requests import count_outcomes, pass_title
from .roundset import Rounds
from .compare import decision_agreement, DecisionChange, sampled_selections

__all__ = ["degraded_signals", "outcomes_section", "pass_errors", "PassErrors",
           "round_agreement", "RoundAgreement", "run_outcomes", "Outcomes", "SideOutcomes"]


class RoundAgreement(NamedTuple):
    round: int
    agree: int  # inputs with the same decision on both sides in every pass
    total: int  # inputs measured on both sides
    used: bool  # the round is among those judged
    differ: Tuple[DecisionChange, ...]  # DecisionChange, the first pass where each differs


def round_agreement(number: int, base_run: RunFile, new_run: RunFile,
                    used: bool) -> RoundAgreement:
    """Return how the decisions of one round's two sides agree, pass by pass."""
    differ: dict = {}
    measured: set = set()
    for item in base_run.passes:
        other = new_run.pass_named(item.name)
        if other is None or item.discarded or other.discarded:
            continue
        base_decisions, new_decisions = item.decisions, other.decisions
        agreement = decision_agreement(base_decisions, new_decisions)
        measured.update(set(base_decisions) & set(new_decisions))
        for i in agreement.differ:
            differ.setdefault(i, DecisionChange(i, base_decisions[i], new_decisions[i],
                                                pass_name=item.name))
    return RoundAgreement(round=number, agree=len(measured) - len(differ),
                          total=len(measured), used=used,
                          differ=tuple(differ[i] for i in sorted(differ)))


class PassErrors(NamedTuple):
    pass_name: str
    # (round, base's failed requests, new's), every round measuring the pass (pass_degraded:
    # their degraded answers)
    counts: Tuple[Tuple[int, int, int], ...]


def pass_errors(rounds: Rounds, *, degraded: bool = False) -> List[PassErrors]:
    """Return the failed requests of each side (with degraded: the degraded answers), pass
    by pass and round by round."""
    runs = rounds.runs
    base, new = rounds.base, rounds.new
    found: dict = {}
    for number, sides in runs.items():
        for item in sides[base].passes:
            other = sides[new].pass_named(item.name)
            if other is None or item.discarded or other.discarded:
                continue
            found.setdefault(item.name, []).append(
                (number, item.measured.degraded, other.measured.degraded) if degraded else
                (number, sum(item.measured.errors.values()), sum(other.measured.errors.values())))
    order = {p.name: p.order for sides in runs.values() for p in sides[base].passes}
    return [PassErrors(name, tuple(counts))
            for name, counts in sorted(found.items(), key=lambda kv: order[kv[0]])]


def run_outcomes(run: RunFile) -> dict:
    """Return count_outcomes() over every measured request of a run, and the ids of prompts
    routed although they expected only a rejection ("unexpected_routing")."""
    requests = [r for item in run.passes if not item.discarded for r in item.requests]
    counts = count_outcomes(requests)
    counts["unexpected_routing"] = tuple(sorted({r.id for r in requests
                                                 if r.outcome == "unexpected_routing"}))
    counts["sampled"], counts["sampled_models"] = sampled_selections(run)
    return counts


class SideOutcomes(NamedTuple):
    """What one side's measured requests of one used round came to: run_outcomes()."""
    round: int
    side: str
    requests: int
    ok: int
    errors: Dict[str, int]  # error kind -> count
    unexpected_routing: Tuple[int, ...]  # prompts routed although they expected a rejection
    rejected: int = 0  # expected rejections
    error_codes: Dict[str, Dict[str, int]] = {}  # error kind -> {the router's code: count}
    degraded: int = 0  # answers that skipped a signal, and their counts by signal and reason
    degraded_signals: Dict[str, Dict[str, int]] = {}
    # inputs whose selected model the router sampled or chose by its state, and the models:
    # apart from decision agreement (compare.sampled_selections)
    sampled: int = 0
    sampled_models: Tuple[str, ...] = ()


def degraded_signals(rounds: Rounds, side: str, pass_name: str) -> Dict[str, Dict[str, int]]:
    """Return a side's degraded answers in a pass by signal and reason, summed over rounds."""
    runs = rounds.runs
    found: Dict[str, Dict[str, int]] = {}
    for sides in runs.values():
        item = sides[side].pass_named(pass_name)
        for signal_name, by in (item.summary.degraded_signals if item and item.summary
                                else {}).items():
            for reason, count in by.items():
                found.setdefault(signal_name, {})[reason] = \
                    found.get(signal_name, {}).get(reason, 0) + count
    return found


def decisions_note(found: Outcomes) -> List[str]:
    """Return the report's first line under --decisions report: decisions are reported in
    full, and only the latency rows decide the exit code."""
    if found.decisions != "report":
        return []
    used = [a for a in found.agreement if a.used]
    differ = [a for a in used if a.agree < a.total]
    inputs = max((a.total - a.agree for a in differ), default=0)
    return [f"decisions reported, not gated (--decisions report): they differ in "
            f"{len(differ)} of {plural(len(used), 'used round')}"
            + (f" (up to {plural(inputs, 'input')} a round)" if differ else "")
            + "; the latency rows decide the exit code"]


def format_agreement(found: Outcomes) -> List[str]:
    """Return the decision agreement of each round and each pass's failed requests."""
    lines = []
    for item in found.agreement:
        note = "" if item.used else " (round left out)"
        listed = ", ".join(f"#{d.id} {shown_decision(d.base)} -> {shown_decision(d.new)}"
                           + (f" ({pass_title(d.pass_name)})" if d.pass_name else "")
                           for d in item.differ[:10])
        more = ", ..." if len(item.differ) > 10 else ""
        lines.append(f"decisions r{item.round}: {item.agree}/{item.total} agree in every "
                     f"pass{note}" + (f"; differ: {listed}{more}" if item.differ else ""))
    for each in found.errors:
        lines.append(f"errors {pass_title(each.pass_name)} ({found.base}/{found.new}): "
                     + ", ".join(f"r{n} {b}/{w}" for n, b, w in each.counts))
    for each in found.degraded:
        lines.append(f"degraded {pass_title(each.pass_name)} ({found.base}/{found.new}): "
                     + ", ".join(f"r{n} {b}/{w}" for n, b, w in each.counts))
    return lines


def format_outcomes(found: Outcomes) -> List[str]:
    """Return the failures of each used round and side by the router's code, the expected
    rejections, the surprises, and why the router shed requests when it did."""
    lines = [f"errors r{o.round} {o.side}: {failure_text(o.errors, o.error_codes)}"
             for o in found.outcomes if o.errors]
    lines += [degraded_answers_line(f"r{o.round} {o.side}", o.degraded, o.degraded_signals)
              for o in found.outcomes if o.degraded]
    lines += [f"sampled selections r{o.round} {o.side}: {plural(o.sampled, 'input')} got a "
              f"model the router sampled or chose by its state ({', '.join(o.sampled_models[:8])}"
              f"{', ...' if len(o.sampled_models) > 8 else ''}): apart from decision agreement"
              for o in found.outcomes if o.sampled]
    if any(o.rejected for o in found.outcomes):
        counts = {(o.round, o.side): o.rejected for o in found.outcomes}
        lines.append(f"expected rejections ({found.base}/{found.new}): " + ", ".join(
            f"r{n} {counts[n, found.base]}/{counts[n, found.new]}" for n in found.used))
    lines += [f"surprise r{o.round} {o.side}: "
              f"{plural(len(o.unexpected_routing), 'prompt')} expected a rejection and got "
              f"routed ({', '.join(f'#{i}' for i in o.unexpected_routing[:10])})"
              for o in found.outcomes if o.unexpected_routing]
    if any("OVERLOADED" in codes for o in found.outcomes
           for codes in o.error_codes.values()):
        lines.append(f"429 OVERLOADED: the router sheds previews beyond global.services.api."
                     f"routing_preview.max_concurrency (default {ROUTER_MAX_CONCURRENCY}) at "
                     f"once, and a preview holds its slot until its inference ends, even after "
                     f"a timeout: lower the concurrency or raise the setting")
    return lines


def outcomes_json(outcomes: SideOutcomes) -> dict:
    """Return a side's outcomes in a round as the rounds JSON holds them: rejected and
    error_codes only where there are any."""
    optional = ("rejected", "error_codes", "degraded", "degraded_signals", "sampled",
                "sampled_models")
    document = {key: value for key, value in outcomes._asdict().items()
                if key not in ("unexpected_routing", *optional)}
    document.update({key: getattr(outcomes, key) for key in optional
                     if getattr(outcomes, key)})
    return {**document, "unexpected_routing": list(outcomes.unexpected_routing)}


class Outcomes(NamedTuple):
    """What the sides' requests came to over the rounds, as the report shows it."""
    base: str
    new: str
    used: Tuple[int, ...]
    decisions: str  # gate or report (--decisions)
    agreement: Tuple[RoundAgreement, ...]  # every round
    errors: Tuple[PassErrors, ...]
    degraded: Tuple[PassErrors, ...]  # passes where either side had any
    outcomes: Tuple[SideOutcomes, ...]  # every used round's, per side


def outcomes_section(found: Outcomes) -> Section:
    """Return decision agreement, failed, degraded and sampled requests as the report's
    section (JSON: agreement, errors, degraded where any, outcomes); under --decisions report
    its lead says the decisions are not gated."""
    agreement = [{"round": a.round, "agree": a.agree, "total": a.total, "used": a.used,
                  "differ": [{"id": d.id, "pass": d.pass_name, "base": d.base, "new": d.new}
                             for d in a.differ]}
                 for a in found.agreement]
    document = {
        "agreement": agreement,
        "errors": [{"pass": e.pass_name, "rounds": [{"round": n, "base": b, "new": w}
                                                    for n, b, w in e.counts]}
                   for e in found.errors],
        # answers that skipped a signal, per pass and round: where either side had any
        **({"degraded": [{"pass": e.pass_name, "rounds": [
            {"round": n, "base": b, "new": w} for n, b, w in e.counts]}
            for e in found.degraded]} if found.degraded else {}),
        "outcomes": [outcomes_json(o) for o in found.outcomes]}
    return Section(key="outcomes", blocks=(*format_agreement(found), *format_outcomes(found)),
                   lead=tuple(decisions_note(found)), json=document,
                   checks=tuple(outcome_checks(found)), page=outcomes_panels(found),
                   record=((20, agreement_sentence(found)), (30, failed_sentence(found))))


def agreement_sentence(found: Outcomes) -> str:
    """Return how the two sides' decisions agreed over the used rounds."""
    used = [a for a in found.agreement if a.used]
    agreed = [a for a in used if a.agree == a.total]
    totals = sorted({a.total for a in used})
    return (f"{agreed[0].agree}/{agreed[0].total} inputs agreed in every pass of every round"
            if used and len(agreed) == len(used) and len(totals) == 1 else
            f"decisions agreed in {len(agreed)} of {len(used)} rounds; "
            + "; ".join(f"r{a.round}: {a.agree}/{a.total}" for a in used if a.agree < a.total))


def failed_sentence(found: Outcomes) -> str:
    """Return each side's failed requests over the used rounds."""
    failed = {side: sum(b if side == found.base else w for e in found.errors
                        for n, b, w in e.counts if n in found.used)
              for side in (found.base, found.new)}
    degraded = {side: sum(b if side == found.base else w for e in found.degraded
                          for n, b, w in e.counts if n in found.used)
                for side in (found.base, found.new)}
    return ("failed requests: none" if not any(failed.values()) else
            "failed requests: " + ", ".join(f"{s} {c}" for s, c in failed.items())) + (
        "; degraded answers: " + ", ".join(f"{s} {c}" for s, c in degraded.items())
        if any(degraded.values()) else "")


def outcomes_panels(found: Outcomes) -> Tuple[Panel, ...]:
    """Return, on the report page, the table of decision agreement and failed (and degraded)
    requests per round, and each side's degraded answers in the closing list."""
    errors = {(e.pass_name, "errors"): {n: (b, w) for n, b, w in e.counts}
              for e in found.errors}
    errors.update({(e.pass_name, "degraded"): {n: (b, w) for n, b, w in e.counts}
                   for e in found.degraded})
    rows = []
    for item in found.agreement:
        differ = ", ".join(f"#{d.id} {shown_decision(d.base)} -> {shown_decision(d.new)}"
                           for d in item.differ[:5]) + (", ..." if len(item.differ) > 5 else "")
        counts = [errors[name].get(item.round) for name in errors]
        rows.append([f"r{item.round}", "yes" if item.used else "left out",
                     f"{item.agree}/{item.total}", differ or "-"]
                    + ["n/a" if c is None else f"{c[0]}/{c[1]}" for c in counts])
    header = ["round", "judged", "decisions agree", "differ"] + [
        f"{pass_title(name)} {what} {found.base}/{found.new}" for name, what in errors]
    degraded = tuple(degraded_answers_line(f"r{o.round} {o.side}", o.degraded, o.degraded_signals)
                     for o in found.outcomes if o.degraded)
    return (Panel(place=60, heading="Decisions and errors per round",
                  items=(Table("", header, rows, [False, False, True, False]),)),
            Panel(place=85, items=(Lines(degraded),)))


def outcome_checks(found: Outcomes) -> List[Check]:
    """Return a check per round's decisions, per pass's failed requests, and per pass where
    either side had degraded answers: a failure where the new side had more, as for failed
    requests; a degraded check's details name the signals and reasons."""
    checks: List[Check] = []
    for item in found.agreement:
        listed = tuple(f"#{d.id} {shown_decision(d.base)} -> {shown_decision(d.new)}"
                       + (f" ({pass_title(d.pass_name)})" if d.pass_name else "")
                       for d in item.differ)  # lines: the Section escapes each
        outcome = "passed" if not item.differ else "failure" if item.used else "skipped"
        checks.append(Check(group="decisions", name=f"r{item.round} decisions",
                            outcome=outcome,
                            message=f"{item.agree}/{item.total} inputs agree in every pass"
                            + ("" if item.used else " (round left out)"), details=listed))
    for each in found.errors:
        worse = any(w > b for _, b, w in each.counts)
        checks.append(Check(group="errors", name=f"{pass_title(each.pass_name)} errors",
                            outcome="failure" if worse else "passed",
                            message=f"failed requests {found.base}/{found.new}: "
                            + ", ".join(f"r{n} {b}/{w}" for n, b, w in each.counts),
                            details=""))
    details = tuple(degraded_answers_line(f"r{o.round} {o.side}", o.degraded,
                                          o.degraded_signals, percentiles=False)
                    for o in found.outcomes if o.degraded)  # lines: the Section escapes each
    return checks + [Check(group="errors", name=f"{pass_title(each.pass_name)} degraded",
                           outcome="failure" if any(w > b for _, b, w in each.counts)
                           else "passed",
                           message=f"degraded answers {found.base}/{found.new}: "
                           + ", ".join(f"r{n} {b}/{w}" for n, b, w in each.counts),
                           details=details)
                     for each in found.degraded]
