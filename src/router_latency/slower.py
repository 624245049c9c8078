"""Slower inputs: which inputs, decisions and prompt lengths got slower over the rounds (a
false-discovery rule over the inputs and again over the groups), and their section."""

from __future__ import annotations

import collections
import json
import math
from typing import Any, List, Optional, Sequence, Tuple, Union

from .constants import NamedTuple
from .words import pct_text, plural, shown_decision, visible
from .report import Block, Heading, Note, Outside, Panel, Section, Table
from .stats import benjamini_hochberg, mean_interval, t_test_p
from .requests import pass_title
from .roundset import Rounds

__all__ = ["input_slowdowns", "slower_section"]


SLOWDOWN_FDR = 0.05  # inputs called slower: the expected share of false ones among them


LENGTH_BUCKETS = (32, 128, 512, 2048)  # prompt characters; BERT's 512 tokens are ~2,000


class Slowdown(NamedTuple):
    """How much slower new ran than base for one input, decision or prompt-length bucket."""
    key: Union[int, str]  # prompt id, decision or bucket label
    ratio: float  # median over rounds of new/base (a group's: of its per-round geometric mean)
    low: Optional[float]  # 95% t interval of the geometric mean over rounds; None: one round
    high: Optional[float]
    slower_rounds: int  # rounds in which new was slower
    rounds: int  # rounds with a successful request on both sides
    p_value: float  # one-sided t test on the per-round log ratios: slower than the tolerance
    call: str = ""  # slower: Benjamini-Hochberg rejects; noise: beyond the tolerance, unproven
    inputs: int = 1
    text: Optional[str] = None  # with the corpus
    length: Optional[int] = None  # characters, with the corpus
    decision: Optional[str] = None  # base's, in the first round it answered


class InputSlowdowns(NamedTuple):
    """Which inputs, decisions and prompt lengths got slower, request by request."""
    pass_name: str
    rounds: Tuple[int, ...]  # the rounds compared
    inputs: Tuple[Slowdown, ...]  # Slowdown per input, the largest ratio first
    decisions: Tuple[Slowdown, ...]  # Slowdown per decision
    lengths: Tuple[Slowdown, ...]  # Slowdown per prompt-length bucket; empty without the corpus
    fdr: float
    tolerance_pct: float


def slowdown_of(key: Any, logs: Sequence[float], tolerance_log: float, **known: Any) -> Slowdown:
    """Return the slowdown shown by per-round log ratios ln(new/base), not yet called."""
    import statistics
    ratio = math.exp(statistics.median(logs))
    slower = sum(v > 0 for v in logs)
    if len(logs) < 2:
        return Slowdown(key=key, ratio=ratio, low=None, high=None, slower_rounds=slower,
                        rounds=len(logs), p_value=1.0, **known)
    interval = mean_interval(logs)
    return Slowdown(key=key, ratio=ratio, low=math.exp(interval.low),
                    high=math.exp(interval.high), slower_rounds=slower, rounds=len(logs),
                    p_value=t_test_p(logs, mu=tolerance_log, alternative="greater"), **known)


def called(items: Sequence[Slowdown], tolerance_log: float, fdr: float) -> List[Slowdown]:
    """Return the items called: slower where Benjamini-Hochberg rejects at fdr over them all,
    noise where the ratio lies beyond the tolerance but its spread over rounds does not
    carry it."""
    rejected = benjamini_hochberg([s.p_value for s in items], fdr)
    return [s._replace(call="slower" if hit else "noise" if s.ratio > math.exp(tolerance_log)
                       else "") for s, hit in zip(items, rejected)]


def length_bucket(length: int) -> str:
    """Return the LENGTH_BUCKETS label of a prompt length in characters."""
    low = 0
    for edge in LENGTH_BUCKETS:
        if length <= edge:
            return f"{low + 1}-{edge} chars" if low else f"<= {edge} chars"
        low = edge
    return f"> {low} chars"


def input_slowdowns(rounds: Rounds, tolerance_pct: float,
                    prompts_text: Optional[dict] = None) -> Optional[InputSlowdowns]:
    """Return which inputs got slower, then the same per decision and prompt-length bucket.

    Per input, the log ratio ln(new/base) of its latency in each round's sequential pass,
    where requests do not queue behind each other, so an input's time is its own; an input
    is called slower only when its own spread over rounds carries it (a one-sided t test
    against the tolerance, Benjamini-Hochberg over all inputs). A group's per-round value is
    the mean log ratio of its inputs. None without a sequential pass on both sides of every
    used round.
    """
    runs = rounds.runs
    base, new, used = rounds.base, rounds.new, rounds.used
    found = [(runs[n][base].pass_named("sequential"), runs[n][new].pass_named("sequential"))
             for n in used]
    pairs = [(b, w) for b, w in found
             if b is not None and w is not None and not b.discarded and not w.discarded]
    if not used or len(pairs) < len(found):  # a used round without both sequential passes
        return None
    tolerance, texts = math.log1p(tolerance_pct / 100), prompts_text or {}
    logs: dict = {}  # prompt id -> {round: ln(new/base)}
    decisions: dict = {}
    for number, (b, w) in zip(used, pairs):
        # fully computed answers only: one that skipped a signal is faster for it
        new_ms = {r.id: r.latency_ms for r in w.requests
                  if r.error is None and not r.degraded and r.latency_ms}
        for r in b.requests:
            if r.error is None and not r.degraded and r.latency_ms and r.id in new_ms:
                logs.setdefault(r.id, {})[number] = math.log(new_ms[r.id] / r.latency_ms)
                decisions.setdefault(r.id, r.decision)
    inputs = called([slowdown_of(i, list(logs[i].values()), tolerance, text=texts.get(i),
                                 length=len(texts[i]) if i in texts else None,
                                 decision=decisions[i]) for i in sorted(logs)],
                    tolerance, SLOWDOWN_FDR)
    by_decision = collections.defaultdict(list)
    by_length = collections.defaultdict(list)
    for item in inputs:
        by_decision[item.decision or "(no decision)"].append(item.key)
        if item.length is not None:
            by_length[(min([e for e in LENGTH_BUCKETS if e >= item.length], default=math.inf),
                       length_bucket(item.length))].append(item.key)

    def group(key: str, members: list) -> Slowdown:
        per_round = [[logs[i][n] for i in members if n in logs[i]] for n in used]
        return slowdown_of(key, [math.fsum(v) / len(v) for v in per_round if v], tolerance,
                           inputs=len(members))

    groups = called([group(k, v) for k, v in sorted(by_decision.items())]
                    + [group(k[1], v) for k, v in sorted(by_length.items())],
                    tolerance, SLOWDOWN_FDR)
    return InputSlowdowns(pass_name="sequential", rounds=tuple(used),
                          inputs=tuple(sorted(inputs, key=lambda s: -s.ratio)),
                          decisions=tuple(groups[:len(by_decision)]),
                          lengths=tuple(groups[len(by_decision):]), fdr=SLOWDOWN_FDR,
                          tolerance_pct=tolerance_pct)


def shown_text(text: str, width: int) -> str:
    """Return the start of a prompt quoted on one line, lone surrogates written as escapes."""
    quoted = json.dumps(text[:width] + ("..." if len(text) > width else ""), ensure_ascii=False)
    # JSON escapes C0 only: DEL, C1, U+2028 and the bidirectional marks are escaped here
    return visible(quoted.encode("utf-8", "backslashreplace").decode("utf-8"))


def ratio_text(item: Slowdown) -> str:
    """Return an input's change in latency as every report writes a change: +7.4% [...]."""
    if item.low is None or item.high is None:
        return pct_text(item.ratio - 1)
    return f"{pct_text(item.ratio - 1)} [{pct_text(item.low - 1)}, {pct_text(item.high - 1)}]"


class SlowdownTables(NamedTuple):
    """Which inputs got slower, as a rounds report shows it."""
    intro: str  # what the figures are
    inputs: Table  # the inputs called slower, then the largest noise: at most `limit`
    more: str  # those called slower beyond them; '' when none
    groups: Table  # per decision and prompt-length bucket


def slowdown_tables(found: Optional[InputSlowdowns], base: str, new: str,
                    limit: int) -> Optional[SlowdownTables]:
    """Return (what the figures are, the inputs with the largest slowdown, those called slower
    beyond them, the table per decision and prompt-length bucket), the router's words in
    cells as Outside; None without per-input figures."""
    if found is None or not found.inputs:
        return None
    slower = [s for s in found.inputs if s.call == "slower"]
    # those called slower first, then the largest noise, then the rest: the table's first rows
    # are the ones its header counts
    shown = sorted(found.inputs, key=lambda s: {"slower": 0, "noise": 1}.get(s.call, 2))[:limit]
    intro = (f"slower inputs: {len(slower)} of {len(found.inputs)} ({pass_title(found.pass_name)} "
             f"pass; change in latency of each input, {new} against {base}: "
             f"median over "
             f"{plural(len(found.rounds), 'round')}, 95% t interval of the geometric mean; "
             f"called slower when its own rounds carry it beyond the {found.tolerance_pct:g}% "
             f"tolerance, false discovery rate {100 * found.fdr:g}% over the inputs and again "
             f"over the groups (one input may be noise among many and its group of one slower); "
             f"a call is a one-sided test, so it may stand where the interval reaches inside "
             f"the tolerance; noise: beyond the tolerance but not carried)")
    texts = any(s.text is not None for s in found.inputs)
    ratio = "change [95% CI]"
    caption = "Called slower, then the largest noise" if slower else "Largest slowdowns"
    inputs = Table(caption, ["input", ratio, "slower in", "call", "decision"]
                   + (["chars", "text"] if texts else []),
                   [[f"#{s.key}", ratio_text(s), f"{s.slower_rounds}/{s.rounds}", s.call or "-",
                     Outside(shown_decision(s.decision))]
                    + ([str(s.length) if s.length is not None else "n/a",
                        Outside(shown_text(s.text, 40)) if s.text is not None else ""]
                       if texts else []) for s in shown],
                   [False, True, True, False, False, True, False][:7 if texts else 5])
    beyond = [f"#{s.key}" for s in slower if s not in shown]
    more = f"{len(beyond)} more called slower: {', '.join(beyond[:20])}" \
        f"{', ...' if len(beyond) > 20 else ''} (--format json lists every input)" \
        if beyond else ""
    groups = Table("By decision and prompt length",
                   ["group", "inputs", ratio, "slower in", "call"],
                   [[Outside(f"{kind} {s.key}"), str(s.inputs), ratio_text(s),
                     f"{s.slower_rounds}/{s.rounds}", s.call or "-"]
                    for kind, items in (("decision", found.decisions), ("length", found.lengths))
                    for s in items], [False, True, True, True, False])
    return SlowdownTables(intro=intro, inputs=inputs, more=more, groups=groups)


def slowdown_blocks(found: Optional[InputSlowdowns], base: str, new: str,
                    limit: int = 10) -> List[Block]:
    """Return the inputs with the largest slowdown, then the slowdown per decision and per
    prompt-length bucket, each table a blank line below what stands above it."""
    tables = slowdown_tables(found, base, new, limit)
    if tables is None:
        return []
    blocks: List[Block] = [tables.intro, "", tables.inputs]
    return blocks + ([tables.more] if tables.more else []) + ["", tables.groups]


def slowdowns_json(found: InputSlowdowns) -> dict:
    """Return which inputs got slower as JSON: every input, decision and length bucket."""
    def item(s: Slowdown, key: str) -> dict:
        fields = s._asdict()
        fields[key] = fields.pop("key")
        return fields

    return {"pass": found.pass_name, "rounds": list(found.rounds), "fdr": found.fdr,
            "tolerance_pct": found.tolerance_pct,
            "inputs": [item(s, "id") for s in found.inputs],
            "decisions": [item(s, "decision") for s in found.decisions],
            "lengths": [item(s, "bucket") for s in found.lengths]}


def slower_section(found: Optional[InputSlowdowns], base: str, new: str) -> Section:
    """Return which inputs got slower as the report's section (JSON: slowdowns)."""
    return Section(key="slowdowns", blocks=tuple(slowdown_blocks(found, base, new)),
                   json={"slowdowns": None if found is None else slowdowns_json(found)},
                   page=slower_panels(found, base, new))


def slower_panels(found: Optional[InputSlowdowns], base: str, new: str) -> Tuple[Panel, ...]:
    """Return which inputs got slower on the report page (twenty of them), nothing without
    a finding."""
    tables = slowdown_tables(found, base, new, 20)
    if tables is None:
        return ()
    return (Panel(place=70, heading="Which inputs got slower", apart=True, items=(
        Note(tables.intro), Heading(tables.inputs.caption, 3), tables.inputs, tables.more,
        Heading(tables.groups.caption, 3), tables.groups)),)
