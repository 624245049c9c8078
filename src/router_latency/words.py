"""How a count, a figure, a decision and a change are written."""

from __future__ import annotations

import json
import unicodedata
import urllib.parse
from typing import Callable, Optional, Sequence, Set

__all__ = [
    "BOUND_PCT", "change_text", "failure_text", "fmt_hundredths", "fmt_signed", "fmt_reading",
    "fmt_value", "metric_label", "metric_title", "p_text", "pct_text", "plural", "scrubbed",
    "scrubbed_cut", "slowdown_text",
    "secret_forms", "shown_decision", "span_text", "visible", "worse_sign",
]


LADDER_TITLES = {"plateau_req_per_s": "plateau req/s", "capacity_req_per_s": "capacity req/s",
                 "usd_per_million": "USD/1M"}


BOUND_PCT = 900.0  # a slowdown past this percent (ten times the time) is written as a bound,
BOUND_TEXT = "more than 10x slower"  # as is a change to less than a tenth of the time: the
FASTER_TEXT = "more than 10x faster"  # figures beyond say nothing the bound does not


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
    """Return text with every secret value (a token, a --header value, in each of the forms
    secret_forms gives it) replaced by [hidden]; secrets longest first, as secret_values
    orders them, so that no shorter one hides a part of a longer one and leaves the rest."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "[hidden]")
    return text


def scrubbed_cut(text: str, limit: int, secrets: Sequence[str], mark: str = "") -> str:
    """Return text scrubbed, then cut to `limit` characters and marked: a secret that the cut
    would split is hidden whole first, never stored in part."""
    text = scrubbed(text, secrets) if secrets else text
    return text if len(text) <= limit else text[:limit] + mark


def secret_forms(value: str) -> Set[str]:
    """Return the forms a secret's text can take in what a router answers or this tool
    records: as it is; JSON-escaped (ASCII-only as Python writes it, UTF-8 as Go does, Go's
    escapes of <, > and &, and escaped twice: a JSON document inside a JSON string); and
    percent-encoded (every reserved character, or '/' kept, or a space as '+', with upper- or
    lower-case hex digits)."""
    forms = {value}
    for ascii_only in (True, False):
        once = json.dumps(value, ensure_ascii=ascii_only)[1:-1]
        forms |= {once, json.dumps(once, ensure_ascii=ascii_only)[1:-1],
                  once.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")}
    for encoded in (urllib.parse.quote(value, safe=""), urllib.parse.quote(value),
                    urllib.parse.quote_plus(value)):
        forms |= {encoded, percent_lower(encoded)}
    return forms


def percent_lower(text: str) -> str:
    """Return percent-encoded text with its hex digits in lower case: %c3%84."""
    parts = text.split("%")
    return parts[0] + "".join("%" + part[:2].lower() + part[2:] for part in parts[1:])


# what is escaped for a terminal, by Unicode category: controls (C0, DEL, C1), format
# characters (every bidirectional mark, override and isolate, U+061C the Arabic letter mark
# among them, "Trojan Source"; zero-width characters; the tag characters that hide ASCII),
# lone surrogates, and the line and paragraph separators
ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
CONTROL_NAMES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(text: str) -> str:
    """Return text on one line, every character of ESCAPED_CATEGORIES written as its escape
    (\\n, \\u001b; one beyond U+FFFF as its UTF-16 pair, \\udb40\\udc41): a decision or
    prompt from a router must not move a terminal's cursor, reorder what it shows or break a
    table. The escapes are JSON's, so that a JSON document printed through it stays valid."""
    if text.isprintable():  # none of those categories (nor any space but ' ')
        return text
    return "".join(escaped_char(char) if unicodedata.category(char) in ESCAPED_CATEGORIES
                   else char for char in text)


def escaped_char(char: str) -> str:
    """Return a character as JSON escapes it: \\n, \\u001b, a pair of \\u beyond U+FFFF."""
    named = CONTROL_NAMES.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


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
    """Return a fraction as a signed percent with one decimal: +7.4%, -46.6%, +0.0%; past
    ten times the time (+900%) "more than 10x slower", below a tenth of it (-90%) "more than
    10x faster": +6023.1% or -99.99% say nothing the bound does not."""
    if 100 * fraction > BOUND_PCT:
        return BOUND_TEXT
    if fraction < -BOUND_PCT / (100 + BOUND_PCT):
        return FASTER_TEXT
    # rounded before the sign is chosen, so that -1e-17 reads +0.0%, not -0.0%
    return f"{round(100 * fraction, 1) + 0.0:+.1f}%"


def slowdown_text(fraction: float) -> str:
    """Return a slowdown as "up to" a bound takes it: "up to +9.5%", and past ten times the
    time "more than 10x" (the sentence says slower: "up to more than 10x slower" read twice)."""
    return "more than 10x" if 100 * fraction > BOUND_PCT else f"up to {pct_text(fraction)}"


def p_text(p: Optional[float]) -> str:
    """Return a p-value as a line writes it: three significant digits, and beyond them a
    bound ("p > 0.999", "p < 0.001": "p 1" claims a certainty no test gives); n/a for none."""
    if p is None:
        return "p n/a"
    if p > 0.999:
        return "p > 0.999"
    return "p < 0.001" if p < 0.001 else f"p {p:.3g}"


def worse_sign(metric: str) -> int:
    """Return +1 where a larger value is worse (latency, cost), -1 where it is better (req/s,
    a ladder's plateau and capacity)."""
    return -1 if metric.endswith("req_per_s") else 1


def fmt_reading(value: Optional[float]) -> str:
    """Return a GPU tool's figure as it read: whole numbers whole, else one decimal."""
    return "n/a" if value is None else f"{value:,.1f}".rstrip("0").rstrip(".")


def span_text(low: Optional[float], high: Optional[float],
              fmt: Callable[[Optional[float]], str] = fmt_value) -> str:
    """Return 'low-high' as figures, one figure when they read the same, n/a for none."""
    if low is None:
        return "n/a"
    return fmt(low) if fmt(low) == fmt(high) else f"{fmt(low)}-{fmt(high)}"
