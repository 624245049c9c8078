"""Tests of constants.py: what several modules use: paths, limits, exit codes."""

import json

import pytest

from router_latency.constants import EXPECTED_HASH_HEADER, PREVIEW_PATH
from conftest import ASK, exchange, final_answer, write_corpus


def test_wait_ready_asks_the_routers_ready_first(scripted, tmp_path, cli, quick_ready_poll):
    asked = []

    def answer(prompt, number):
        if not prompt:
            asked.append("ready")
            if len(asked) <= 3:
                return [final_answer(b'{"status":"starting","ready":false}',
                                     b"503 Service Unavailable")]
            return [final_answer(b'{"status":"ready","ready":true}')]
        asked.append("preview")
        return [final_answer()]

    router = scripted(answer)
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    args = ["run", "--url", router.url, "--corpus", corpus, "--out", tmp_path / "o.json",
            "--label", "x", "-c", "1", "--warmup", "0", "--quiet"]
    result = cli(*args)
    assert result.code == 2 and result.err == (
        f"router-latency: error: router at {router.url}{PREVIEW_PATH} is not ready: it "
        f"answered HTTP 503 Service Unavailable to /ready; --wait-ready SECONDS waits for a "
        f"starting router (--url)\n")
    assert asked == ["ready"]
    assert cli(*args, "--wait-ready", "20").code == 0
    # not one preview before /ready said ready
    assert asked[:5] == ["ready", "ready", "ready", "ready", "preview"]


@pytest.mark.parametrize("method, path, body, status, code", [
    ("GET", PREVIEW_PATH, b"", 405, None),
    ("PUT", PREVIEW_PATH, ASK, 405, None),
    ("POST", "/api/v1/eval", ASK, 404, None),
    ("POST", PREVIEW_PATH, b'{"model": "MoM", "text": "hi", "stream": true}', 400,
     "INVALID_INPUT"),
    ("POST", PREVIEW_PATH, b'{"messages": [{"role": "user", "content": "hi", "x": 1}]}', 400,
     "INVALID_INPUT"),
    ("POST", PREVIEW_PATH, b'{"model": "MoM", "text": ""}', 400, "INVALID_INPUT"),
    ("POST", PREVIEW_PATH, b'{"messages": []}', 400, "INVALID_INPUT"),
    ("POST", PREVIEW_PATH, b'[1]', 400, "INVALID_INPUT"),
    ("POST", PREVIEW_PATH, b'{"model": "MoM-renamed", "text": "hi"}', 400,
     "INVALID_ROUTING_MODEL"),
])
def test_the_simulator_refuses_as_the_router_does(simulator, double, method, path, body,
                                                  status, code):
    for server in (simulator(delay_ms=0), double()):
        got, headers, answer = exchange(server.url, method, path, body)
        assert got == status, (server, answer)
        assert "x-vsr-config-hash" not in headers  # never on an error envelope
        if code:
            assert json.loads(answer)["error"]["code"] == code


@pytest.mark.parametrize("text", [" ", " \t\n ", "\u3000"])
def test_whitespace_is_routed(simulator, double, text):
    for server in (simulator(delay_ms=0), double()):
        status, _, answer = exchange(server.url, "POST", PREVIEW_PATH, json.dumps(
            {"messages": [{"role": "user", "content": text}]}).encode())
        assert status == 200 and json.loads(answer)["original_text"] == text


def test_a_body_over_10_mib_is_refused_with_413(simulator, double):
    big = json.dumps({"text": "x" * (10 * 1024 * 1024)}).encode()
    for server in (simulator(delay_ms=0), double()):
        status, headers, answer = exchange(server.url, "POST", PREVIEW_PATH, big)
        assert status == 413 and json.loads(answer)["error"]["code"] == "REQUEST_BODY_TOO_LARGE"
        assert "x-vsr-config-hash" not in headers


def test_trace_request_id_and_the_expected_config_hash(simulator):
    router = simulator(delay_ms=0)
    _, headers, body = exchange(router.url, "POST", PREVIEW_PATH + "?trace=true", ASK,
                                {"X-Request-Id": "req-42"})
    assert headers["x-request-id"] == "req-42" and "eval_trace" in json.loads(body)
    _, headers, body = exchange(router.url, "POST", PREVIEW_PATH, ASK)
    assert "eval_trace" not in json.loads(body) and len(headers["x-request-id"]) == 32
    for expected, status in ((router.config_hash, 200), ("a" * 64, 412), ("A" * 64, 400),
                             ("short", 400)):
        got, headers, _ = exchange(router.url, "POST", PREVIEW_PATH, ASK,
                                   {EXPECTED_HASH_HEADER: expected})
        assert got == status and ("x-vsr-config-hash" in headers) == (status == 200)


# ==== records: the run's NamedTuple and typing's ====

def both_records(body):
    """Return the record a class body makes under typing.NamedTuple and under constants'."""
    import typing
    from router_latency import constants
    made = []
    for base in (typing.NamedTuple, constants.NamedTuple):
        space = {"NamedTuple": base, "__name__": "router_latency.somewhere",
                 "Optional": typing.Optional, "Tuple": typing.Tuple}
        exec(compile("from __future__ import annotations\n" + body, "<record>", "exec"), space)
        made.append(space["Pass"])
    return made


RECORD = '''
class Pass(NamedTuple):
    """One pass: its name, its figures and what it says."""
    name: str
    figures: Tuple[float, ...]
    level: int = 1
    note: Optional[str] = None

    @property
    def total(self) -> float:
        return sum(self.figures)

    def named(self, name: str) -> Pass:
        return self._replace(name=name)

    @classmethod
    def empty(cls) -> Pass:
        return cls("", ())

    LIMIT = 3
'''


def test_a_record_is_what_typing_namedtuple_makes():
    """The run's NamedTuple (constants.py, which skips typing's compiling of each annotation)
    makes the class typing.NamedTuple makes, for everything the tool does with records: its
    fields and defaults, methods, properties, class attributes, docstring, module, names,
    repr, equality, _replace, _asdict, _make, json; the annotations alike as text."""
    import typing
    typed, ours = both_records(RECORD)
    assert type(ours) is type(typed) is type and ours.__mro__[1:] == typed.__mro__[1:]
    for name in ("_fields", "_field_defaults", "__doc__", "__module__", "__name__",
                 "__qualname__", "__slots__", "LIMIT", "__match_args__"):
        assert getattr(ours, name, None) == getattr(typed, name, None), name
    # every attribute of the class: the same names, each of the same kind
    left_out = {"__orig_bases__"}  # typing's record of the base it replaced
    assert set(vars(ours)) == set(vars(typed)) - left_out
    for name, value in vars(typed).items():
        if name not in left_out:
            assert type(vars(ours)[name]) is type(value), name
    # annotations: typing's are ForwardRefs of the text, the run's the text itself
    forward = {k: v.__forward_arg__ if isinstance(v, typing.ForwardRef) else v
               for k, v in typed.__annotations__.items()}
    assert ours.__annotations__ == forward == {"name": "str", "figures": "Tuple[float, ...]",
                                               "level": "int", "note": "Optional[str]"}
    assert ours.__new__.__annotations__ == forward
    for make in (lambda c: c("a", (1.0, 2.0)), lambda c: c("b", (), 2, "x"),
                 lambda c: c(name="c", figures=(3.0,), note="y"), lambda c: c.empty(),
                 lambda c: c._make(["d", (4.0,), 5, None])):
        mine, theirs = make(ours), make(typed)
        assert repr(mine) == repr(theirs) and mine == theirs and hash(mine) == hash(theirs)
        assert mine._asdict() == theirs._asdict() and mine.total == theirs.total
        assert repr(mine.named("z")) == repr(theirs.named("z"))
        assert json.dumps(mine) == json.dumps(theirs) and isinstance(mine, tuple)
    with pytest.raises(TypeError) as typed_error:
        typed("a")
    with pytest.raises(TypeError) as our_error:
        ours("a")
    assert str(our_error.value) == str(typed_error.value)


@pytest.mark.parametrize("body", [
    "class Pass(NamedTuple):\n    a: int = 1\n    b: int\n",
    "class Pass(NamedTuple):\n    a: int = 1\n    c: int = 2\n    b: int\n",
    "class Pass(NamedTuple):\n    a: int\n    _replace: int = 1\n",
    "class Pass(NamedTuple):\n    a: int\n    def _asdict(self): pass\n",
])
def test_a_record_refuses_what_typing_namedtuple_refuses(body):
    """A field without a default after one with, and a name namedtuple keeps, are refused
    by the run's NamedTuple with typing's error and words."""
    import typing
    from router_latency import constants
    errors = []
    for base in (typing.NamedTuple, constants.NamedTuple):
        with pytest.raises((TypeError, ValueError, AttributeError)) as error:
            exec(compile(body, "<record>", "exec"), {"NamedTuple": base, "__name__": "x"})
        errors.append((type(error.value), str(error.value)))
    assert errors[0] == errors[1]


def test_every_record_of_the_package_is_made_by_the_runs_namedtuple():
    """Every record class of the package is a namedtuple of the run's making: its annotations
    are text, not typing's ForwardRefs (a module that imported typing's NamedTuple again
    would load typing's check of every annotation at every start)."""
    import importlib
    import pkgutil
    import typing
    import router_latency
    records = [value for module in pkgutil.iter_modules(router_latency.__path__)
               for value in vars(importlib.import_module(f"router_latency.{module.name}")).values()
               if isinstance(value, type) and issubclass(value, tuple)
               and hasattr(value, "_fields") and value.__module__.startswith("router_latency")]
    assert len(records) > 100
    for record in records:
        assert not any(isinstance(v, typing.ForwardRef)
                       for v in record.__annotations__.values()), record


# ==== patterns compiled where first used ====

def test_a_lazy_pattern_is_compiled_on_its_first_use_and_answers_as_the_compiled_one():
    """lazy_pattern compiles nothing until a use (a pattern that cannot compile is refused
    then, with re's error), and then answers every public attribute of a compiled pattern as
    it does (PATTERN_FACE names them all), as its own attributes from then on."""
    import re
    from router_latency.constants import lazy_pattern, PATTERN_FACE
    broken = lazy_pattern("(")
    with pytest.raises(re.error):
        broken.match("x")
    compiled = re.compile(r"(?P<word>[a-z]+)-(\d+)", re.IGNORECASE)
    lazy = lazy_pattern(r"(?P<word>[a-z]+)-(\d+)", re.IGNORECASE)
    assert "match" not in vars(lazy)
    assert {n for n in dir(compiled) if not n.startswith("_")} == set(PATTERN_FACE)
    for text in ("ab-12 cd-3", "none", "X-1"):
        assert repr(lazy.match(text)) == repr(compiled.match(text))
        assert repr(lazy.fullmatch(text)) == repr(compiled.fullmatch(text))
        assert [m.span() for m in lazy.finditer(text)] == \
            [m.span() for m in compiled.finditer(text)]
        assert lazy.findall(text) == compiled.findall(text)
        assert lazy.sub(r"\2", text) == compiled.sub(r"\2", text)
        assert lazy.subn("", text) == compiled.subn("", text)
        assert lazy.split(text) == compiled.split(text)
        assert repr(lazy.search(text)) == repr(compiled.search(text))
    assert (lazy.pattern, lazy.flags, lazy.groups, lazy.groupindex) == \
        (compiled.pattern, compiled.flags, compiled.groups, compiled.groupindex)
    assert set(PATTERN_FACE) <= set(vars(lazy))


def test_a_lazy_pattern_copies_and_pickles_used_or_not_and_has_nothing_but_a_patterns_face():
    """copy and pickle make a LazyPattern without __init__ and probe it (__setstate__,
    __reduce_ex__'s): a name that is not a pattern's is missing, not a compile that reads the
    source not yet set (a recursion); a copy answers as the original."""
    import copy
    import pickle
    from router_latency.constants import lazy_pattern
    for used in (False, True):
        lazy = lazy_pattern(r"a(\d)")
        if used:
            assert lazy.search("xa1").group(1) == "1"
        for twin in (copy.copy(lazy), pickle.loads(pickle.dumps(lazy))):
            assert type(twin) is type(lazy)
            assert twin.search("xa2").group(1) == "2"
        with pytest.raises(AttributeError):
            lazy.no_such_attribute
