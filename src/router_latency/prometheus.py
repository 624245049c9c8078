"""The router's metrics as Prometheus writes them: the text exposition parsed into series, the
change of the kept series over a pass, and its histograms (buckets, sum and count). Pure: the
scrape itself is captures.py's."""

from __future__ import annotations

import math
import re
from typing import Optional, Sequence

from .constants import lazy_pattern, NamedTuple
from .errors import file_number

__all__ = ["histogram_deltas", "Histogram", "histograms_of", "metric_deltas", "parse_prometheus"]


PROMETHEUS_NAME = lazy_pattern(r"[A-Za-z_:][A-Za-z0-9_:]*")


def parse_prometheus(text: str) -> dict[str, float]:
    """Return {series: value} of a Prometheus text exposition (format 0.0.4).

    The series is the metric name with its labels as they stand, sorted by label name, so the
    same series scraped twice has the same key. Comments and malformed lines are skipped.
    """
    samples = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = PROMETHEUS_NAME.match(line)
        if not match:
            continue
        name, rest = match.group(), line[match.end():]
        labels = ""
        if rest.startswith("{"):
            end = _label_block_end(rest)
            if end < 0:
                continue
            pairs = re.findall(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"',
                               rest[1:end])
            labels = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs)) + "}"
            rest = rest[end + 1:]
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        samples[name + labels] = value
    return samples


def _label_block_end(text: str) -> int:
    """Return the index of the brace closing a label block, skipping quoted values; -1 if none."""
    quoted = escaped = False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "}" and not quoted:
            return i
    return -1


def metric_deltas(before: dict[str, float], after: dict[str, float],
                  patterns: Sequence[re.Pattern[str]]) -> dict[str, float]:
    """Return after - before of the series whose name matches a pattern (a new series from 0)."""
    deltas = {}
    for series, value in sorted(after.items()):
        name = series.split("{", 1)[0]
        if any(p.search(name) for p in patterns) and math.isfinite(value):
            previous = before.get(series, 0.0)
            # a delta beyond 2^53 (a byte counter of 1e20) the run file's reader refuses:
            # no figure, as the reader's twin says (file_number), not a run compare refuses
            if math.isfinite(previous) and file_number(abs(value - previous)) is not None:
                deltas[series] = value - previous
    return deltas


def histogram_deltas(before: dict[str, float], after: dict[str, float],
                     names: Sequence[str]) -> dict[str, float]:
    """Return after - before of every bucket, sum and count series of the named histograms,
    as the router's bench/cpu-vs-gpu scripts take them (a series new since before from 0; a
    counter that went down, a restart, is left out rather than read as negative)."""
    parts = {f"{name}{end}" for name in names for end in ("_bucket", "_sum", "_count")}
    deltas = {}
    for series, value in sorted(after.items()):
        if series.split("{", 1)[0] in parts and math.isfinite(value):
            delta = value - before.get(series, 0.0)
            if file_number(delta) is not None:  # finite, >= 0 and within 2^53
                deltas[series] = delta
    return deltas


class Histogram(NamedTuple):
    """One histogram series over a pass: the differences of its count, sum and buckets."""
    name: str
    labels: tuple[tuple[str, str], ...]  # (label, value) pairs but le, sorted
    observations: float  # the _count series (a field named count would hide tuple.count)
    sum: float  # in the histogram's unit (seconds for the router's)
    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), by bound, +Inf last

    @property
    def mean(self) -> Optional[float]:
        return self.sum / self.observations if self.observations > 0 else None

    def quantile(self, q: float, *, resolved: bool = False) -> Optional[float]:
        """Return the q-quantile (0..1) interpolated linearly within its bucket, as
        Prometheus's histogram_quantile does: an estimate whose error is the bucket's
        width; in the +Inf bucket, the highest finite bound. resolved: None instead where
        the bucket says nothing of the value (the lowest one, from 0, or +Inf): 2.5 ms read
        in the router's 0 to 5 ms bucket would be a figure of the buckets, not of the time."""
        total = self.buckets[-1][1] if self.buckets else 0.0
        if total <= 0:
            return None
        rank, lower, below = q * total, 0.0, 0.0
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                if resolved and (lower <= 0 or math.isinf(bound)):
                    return None
                if math.isinf(bound):
                    return lower
                if cumulative == below:
                    return bound
                return lower + (bound - lower) * (rank - below) / (cumulative - below)
            lower, below = bound, cumulative
        return lower


def histograms_of(deltas: dict[str, float]) -> list[Histogram]:
    """Return the Histograms of a pass's histogram differences, by name and labels."""
    found: dict = {}
    for series, value in deltas.items():
        name, _, rest = series.partition("{")
        pairs = re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', rest)
        le = next((v for k, v in pairs if k == "le"), None)
        base, _, part = name.rpartition("_")
        entry = found.setdefault((base, tuple((k, v) for k, v in pairs if k != "le")),
                                 {"count": 0.0, "sum": 0.0, "buckets": []})
        if part == "bucket" and le is not None:
            try:
                entry["buckets"].append((float(le), value))
            except ValueError:
                continue
        elif part in ("sum", "count"):
            entry[part] = value
    return [Histogram(name, labels, entry["count"], entry["sum"], tuple(sorted(entry["buckets"])))
            for (name, labels), entry in sorted(found.items())]
