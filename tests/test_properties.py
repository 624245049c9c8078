"""Property tests (hypothesis): extraction, intervals, percentiles, run-file round trips."""

import json
import math

from hypothesis import given, settings, strategies as st

import router_latency as rl
from conftest import SETTINGS


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
