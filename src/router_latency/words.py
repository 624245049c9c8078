"""How a count, a figure, a decision and a change are written."""

from __future__ import annotations

import re
from typing import Optional, Sequence

__all__ = [
    "change_text", "failure_text", "fmt_hundredths", "fmt_signed", "fmt_value", "metric_label",
    "metric_title", "pct_text", "plural", "scrubbed", "shown_decision", "visible",
]


LADDER_TITLES = {"plateau_req_per_s": "plateau req/s", "capacity_req_per_s": "capacity req/s",
                 "usd_per_million": "USD/1M"}


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def metric_title(metric: str) -> str:
    if metric in LADDER_TITLES:
        return LADDER_TITLES[metric]
    if metric == "j_per_request":  # the router's GPUs' energy (telemetry)
        return "J/request"
    return "req/s" if metric == "req_per_s" else metric.replace("_ms", "")


def fmt_hundredths(value: float) -> str:
    """Return a ladder's req/s or latency to the hundredth, so that what is worked out from
    its table by hand (capacity between two steps, cost per million) comes out as printed."""
    return f"{value:.2f}"


def scrubbed(text: str, secrets: Sequence[str]) -> str:
    """Return text with every secret value (a token, a --header value) replaced by [hidden]."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "[hidden]")
    return text


# C0, DEL, C1, the line and paragraph separators, and the marks that reorder what follows
# them on screen (bidirectional overrides, "Trojan Source")
CONTROL_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e"
                           "\u2066-\u2069]")
CONTROL_NAMES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(text: str) -> str:
    """Return text on one line, every control character written as its escape (\\n, \\u001b):
    a decision or prompt from a router must not move a terminal's cursor or break a table.
    The escapes are JSON's, so that a JSON document printed through it stays valid."""
    if CONTROL_CHARS.search(text) is None:
        return text
    return CONTROL_CHARS.sub(
        lambda m: CONTROL_NAMES.get(m.group()) or f"\\u{ord(m.group()):04x}", text)


def shown_decision(decision: Optional[str]) -> str:
    """Return a decision as every table and line shows it: on one line (see visible)."""
    return visible(decision) if decision else "(no decision)"


def failure_text(errors: dict, codes: Optional[dict] = None) -> str:
    """Return failed requests by kind and by the router's code: 'http_4xx: OVERLOADED 12,
    timeout 1'; requests of a kind without a code are counted under the kind alone."""
    parts = []
    for kind, count in errors.items():
        by_code = (codes or {}).get(kind, {})
        parts += [f"{kind}: {code} {n}" for code, n in by_code.items()]
        if count > sum(by_code.values()):
            parts.append(f"{kind} {count - sum(by_code.values())}")
    return ", ".join(parts)


def fmt_value(value: Optional[float]) -> str:
    """Return a figure with about three significant digits, or n/a."""
    if value is None:
        return "n/a"
    magnitude = abs(value)
    decimals = 0 if magnitude >= 100 else 1 if magnitude >= 10 else 2 if magnitude >= 1 else 3
    text = f"{value:,.{decimals}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def fmt_signed(value: float) -> str:
    text = fmt_value(value)
    return text if text.startswith("-") or not text.strip("0.,") else f"+{text}"


def metric_label(metric: str) -> str:
    """Return a metric as tables name it, with its unit: p50 ms, req/s."""
    return metric_title(metric) + (" ms" if metric.endswith("_ms") else "")


def change_text(speedup: Optional[float], low: Optional[float] = None,
                high: Optional[float] = None) -> str:
    """Return the change of the new side against the base as every report writes it: the
    signed percent change in time per request, + slower, - faster: +7.4% [+2.1%, +12.9%].

    `speedup` is above 1 when new is better (base/new for latency, new/base for req/s), so the
    change is 1/speedup - 1 (for req/s, the change in time per request); the interval, where
    given, is that of the speedup, turned the same way.
    """
    if speedup is None or not speedup > 0:
        return "n/a"
    text = pct_text(1 / speedup - 1)
    if not low or not high:
        return text
    return f"{text} [{pct_text(1 / high - 1)}, {pct_text(1 / low - 1)}]"


def pct_text(fraction: float) -> str:
    """Return a fraction as a signed percent with one decimal: +7.4%, -46.6%, +0.0%."""
    # rounded before the sign is chosen, so that -1e-17 reads +0.0%, not -0.0%
    return f"{round(100 * fraction, 1) + 0.0:+.1f}%"
