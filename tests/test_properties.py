"""Property tests (hypothesis): extraction, intervals, percentiles, run-file round trips."""

import json
import math

from hypothesis import given, settings, strategies as st

import router_latency as rl

SETTINGS = settings(max_examples=150, deadline=None)
NOISE_KEYS = st.sampled_from(["description", "expected", "category", "id", "setup", "items",
                              "name", "x"])
TEXT = st.text(min_size=1, max_size=20)
PROMPT_KEYS = st.sampled_from(["query", "question", "prompt", "original_question"])


@st.composite
def document_with_prompts(draw, depth=0):
    """Return (JSON value, the prompts placed in it in document order)."""
    kind = draw(st.sampled_from(["leaf", "list", "dict"] if depth < 4 else ["leaf"]))
    if kind == "leaf":
        return draw(st.one_of(st.none(), st.integers(), st.booleans(), TEXT)), []
    if kind == "list":
        items = [draw(document_with_prompts(depth + 1))
                 for _ in range(draw(st.integers(0, 3)))]
        return [v for v, _ in items], [p for _, ps in items for p in ps]
    document, placed = {}, []
    for _ in range(draw(st.integers(0, 4))):
        choice = draw(st.sampled_from(["noise", "prompt", "similar", "messages"]))
        if choice == "prompt":
            key, text = draw(PROMPT_KEYS), draw(TEXT)
            if key in document:
                continue
            document[key] = text
            placed.append(text)
        elif choice == "similar" and "similar_questions" not in document:
            texts = draw(st.lists(TEXT, max_size=3))
            document["similar_questions"] = texts
            placed.extend(texts)
        elif choice == "messages" and "messages" not in document:
            user, system = draw(TEXT), draw(TEXT)
            document["messages"] = [{"role": "system", "content": system},
                                    {"role": "user", "content": user}]
            placed.append(user)
        else:
            key = draw(NOISE_KEYS)
            if key in document:
                continue
            value, inner = draw(document_with_prompts(depth + 1))
            document[key] = value
            placed.extend(inner)
    return document, placed


@SETTINGS
@given(document_with_prompts())
def test_extraction_finds_exactly_the_prompts_placed(case):
    document, placed = case
    assert list(rl.extract_prompts(json.loads(json.dumps(document)))) == placed


FINITE = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
PAIRS = st.integers(2, 12).flatmap(
    lambda n: st.tuples(st.lists(FINITE, min_size=n, max_size=n),
                        st.lists(FINITE, min_size=n, max_size=n)))


@SETTINGS
@given(PAIRS)
def test_paired_interval_contains_its_mean_and_is_symmetric(pair):
    base, new = pair
    interval = rl.paired_interval(base, new)
    assert interval.low <= interval.mean <= interval.high
    assert math.isclose(interval.mean - interval.low, interval.high - interval.mean,
                        rel_tol=1e-9, abs_tol=1e-6)
    assert interval.df == len(base) - 1


@SETTINGS
@given(PAIRS, st.floats(min_value=0.01, max_value=100), st.floats(min_value=-1e3, max_value=1e3))
def test_paired_interval_scales_and_shifts_with_its_data(pair, scale, shift):
    base, new = pair
    interval = rl.paired_interval(base, new)
    scaled = rl.paired_interval([b * scale for b in base], [n * scale for n in new])
    tolerance = 1e-6 * (1 + max(abs(v) for v in base + new)) * scale
    for a, b in zip(scaled[:3], interval[:3]):
        assert math.isclose(a, b * scale, abs_tol=tolerance * 10)
    shifted = rl.paired_interval(base, [n + shift for n in new])
    for a, b in zip(shifted[:3], interval[:3]):
        assert math.isclose(a, b + shift, abs_tol=tolerance * 10 + 1e-6 * abs(shift))


@SETTINGS
@given(st.lists(FINITE, min_size=1, max_size=50), st.floats(0, 100), st.floats(0, 100))
def test_percentile_is_monotone_in_q_and_within_the_data(values, q1, q2):
    low_q, high_q = sorted((q1, q2))
    low, high = rl.percentile(values, low_q), rl.percentile(values, high_q)
    assert min(values) <= low <= high <= max(values)
