"""What several modules use: paths, the router's header names and defaults, limits, exit codes."""

from __future__ import annotations

import collections
import re
import signal
from typing import Any, Callable, cast, Dict, List, Tuple, TYPE_CHECKING

if TYPE_CHECKING:
    from typing import NamedTuple

__all__ = [
    "__version__", "AUTO_MODEL_NAMES", "CACHE_ADVICE", "CACHE_SERIES", "CONFIG_HASH_HEADER",
    "CONFIG_HASH_NAME",
    "CONFIG_HASH_PATTERN", "DEFAULT_DECISION_PATHS", "DEFAULT_GLOB", "DEFAULT_HISTOGRAMS",
    "DEFAULT_MODEL", "ERROR_CODE_PATTERN", "EXIT_GATE", "EXIT_INCONCLUSIVE", "EXIT_OK",
    "EXIT_SIGNAL", "EXIT_USAGE", "EXPECTED_HASH_HEADER", "LADDER_GATE_NAMES", "LADDER_MARGIN_PCT",
    "LADDER_METRICS", "LADDER_PASS", "LATE_BODY_MS", "MAX_FILE_NUMBER", "MAX_LATENCY_MS",
    "MAX_PLAN_ROUNDS", "MAX_REASON_CHARS", "MAX_SIGNALS", "MIN_ROUNDS", "NamedTuple",
    "PREVIEW_PATH",
    "PROMPT_KEYS", "READY_PATH", "ROUTER_MAX_CONCURRENCY", "ROUTER_TIMEOUT_S", "ROW_METRICS",
    "RUNTIME_COUNTERS", "RUNTIME_GAUGES", "SIGNAL_NAME_PATTERN",
    "STOP_POLL_S", "TIME_WINDOWS", "lazy_pattern",
]


# ==== patterns compiled where first used ====
# A pattern that only some commands use is compiled on its first use, not as its module loads:
# re's cache is empty in a new process, and compiling is about 0.1 ms a pattern. A pattern
# matched in every request's answer stays re.compile()d: after its first use a LazyPattern's
# methods are attributes of its own, which Python looks up more slowly than a method.
PATTERN_FACE = ("match", "fullmatch", "search", "sub", "subn", "split", "findall", "finditer",
                "scanner", "pattern", "flags", "groups", "groupindex")


class LazyPattern:
    """A regular expression compiled on its first use, then answering as the compiled one
    (its methods and attributes copied onto this object)."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.source = (pattern, flags)

    def __getattr__(self, name: str) -> Any:  # only for a name not copied yet: the first use
        if name not in PATTERN_FACE:  # copy's and pickle's probes of an object not yet made
            raise AttributeError(name)
        compiled = re.compile(*self.source)
        for attribute in PATTERN_FACE:
            setattr(self, attribute, getattr(compiled, attribute))
        return getattr(compiled, name)


def lazy_pattern(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """Return re.compile(pattern, flags), compiled on its first use (LazyPattern)."""
    # a Pattern to its callers: every attribute they read is the compiled pattern's own
    return cast("re.Pattern[str]", LazyPattern(pattern, flags))


__version__ = "0.1.0"

PREVIEW_PATH = "/api/v1/routing/preview"
READY_PATH = "/ready"  # the router's readiness: 503 until its start-up completes
# the model a preview names by default: none, so the router uses its default (an empty model
# resolves to its auto routing on any configuration); MoM, the default auto model name, is
# refused by a configuration that names its own (config: DefaultAutoModelName "MoM",
# LegacyAutoModelAlias "auto", DefaultVSRAutoModelName "vllm-sr/auto", auto_model_name(s))
DEFAULT_MODEL = ""
AUTO_MODEL_NAMES = ("vllm-sr/auto", "auto", "MoM")  # the auto names of a default configuration
PROMPT_KEYS = ("query", "question", "prompt", "original_question")
DEFAULT_GLOB = "e2e/**/testdata/**/*.json"
DEFAULT_DECISION_PATHS = (
    "decision_result.decision_name|routing_decision|decision",  # first present wins
    "selected_model?",  # appended when present
)
ERROR_CODE_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")  # the router's error.code
CONFIG_HASH_HEADER = b"x-vsr-config-hash"  # the runtime configuration that answered
CONFIG_HASH_NAME = CONFIG_HASH_HEADER.decode()
CONFIG_HASH_PATTERN = re.compile(r"[0-9a-f]{64}")  # the router sends exactly this, or nothing
EXPECTED_HASH_HEADER = "x-sr-bench-expected-config-hash"  # 412 from a router serving another
ROUTER_MAX_CONCURRENCY = 16  # global.services.api.routing_preview.max_concurrency default
ROUTER_TIMEOUT_S = 120  # global.services.api.routing_preview.request_timeout_seconds default
# the largest number a file may hold: counts and sums stay exact, nothing overflows to inf
MAX_FILE_NUMBER = 2 ** 53
MAX_LATENCY_MS = 86_400_000  # a latency in a file is at most a day
MAX_REASON_CHARS = 160  # what a malformed answer's reason keeps
# per-signal times: the run file keeps a table of at most MAX_SIGNALS names, each matching
# SIGNAL_NAME_PATTERN; a request keeps one number per name (null: not reported), like the
# decision bounded whatever an answer holds
MAX_SIGNALS = 32
SIGNAL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
# the router's histograms scraped around each pass with --metrics-url (its
# pkg/observability/metrics and pkg/modelservice, and its runtime's own /metrics)
DEFAULT_HISTOGRAMS = ("llm_signal_extraction_latency_seconds",
                      "llm_decision_evaluation_latency_seconds",
                      "vsr_model_runtime_request_duration_seconds",
                      "vsr_model_runtime_server_seconds", "vllm_srun_queue_duration_seconds",
                      "vllm_sr_runtime_queue_duration_seconds",  # the runtime's two names
                      # the exchange outside the runtime (its Server-Timing's rest), and the
                      # waits of request bundling (a stage's first call for its others)
                      "vsr_model_runtime_transport_seconds",
                      "vsr_model_runtime_bundle_wait_seconds",
                      "vsr_model_runtime_bundle_question_wait_seconds")
# the runtime's load, read with --metrics-url whatever --metric keeps (the router's
# pkg/modelservice metrics and the runtime's own, under either name): counters, their
# increase over a pass (a stage's first and later decisions calls, dispatches per replica,
# questions dropped at their deadline, rows per forward); gauges, as read after the pass
RUNTIME_COUNTERS = lazy_pattern(
    r"^(vsr_model_runtime_stage_decision_calls_total|vsr_model_runtime_replica_requests_total"
    r"|(vllm_srun|vllm_sr_runtime)_(deadline_dropped_questions_total|batch_rows_sum"
    r"|batch_rows_count))$")
RUNTIME_GAUGES = lazy_pattern(r"^(vsr_model_runtime_replica_(ready|inflight|admitted_bytes)"
                              r"|(vllm_srun|vllm_sr_runtime)_queue_depth)$")
STOP_POLL_S = 0.1  # blocking waits (connects, probes, pauses) look at the stop flag this often
ROW_METRICS = ("p50_ms", "p95_ms", "p99_ms", "mean_ms", "req_per_s")  # rows of `rounds`
LADDER_PASS = "ladder"  # the rows of `rounds` that hold what a ladder derives
# rows of a ladder: the plateau's throughput, capacity within the SLO, USD per million requests
LADDER_METRICS = ("plateau_req_per_s", "capacity_req_per_s", "usd_per_million")
LADDER_GATE_NAMES = {"plateau": "plateau_req_per_s", "capacity": "capacity_req_per_s",
                     "cost": "usd_per_million"}  # --gate's names of those rows
LADDER_MARGIN_PCT = 10.0  # a step that adds less throughput than this over the one before
# result caches: the router's per-model counter (result="hit") and the runtime's own
# (outcome="hit"), under either of the runtime's names (vllm-srun, vllm-sr-runtime)
CACHE_SERIES = lazy_pattern(r"^(vsr_model_runtime_result_cache_total|vllm_srun_result_cache_total"
                            r"|vllm_sr_runtime_result_cache_total)$")
# the router's per-model result cache under each runtime name (docs/gpu-node.md, "Which names a
# router reads"; the router's pkg/modelservice/cache.go and its release note for the runtime)
CACHE_ADVICE = ("turn both off (VLLM_SRUN_RESULT_CACHE=0 (routers from #4618 on, the newest), "
                "or VLLM_SR_RUNTIME_RESULT_CACHE=0 (builds of main between #4481 and #4618), "
                "and the runtime's --result-cache-entries 0) so that every request computes")
MIN_ROUNDS = 3  # fewer rounds give intervals too wide to gate on
# an answer whose body came this long after its head (a server writing them apart with Nagle's
# algorithm on waits for this host's delayed ACK, about 40 ms on Linux): a late body
LATE_BODY_MS = 30
# the most rounds a plan proposes and a sequential plan (--sequential, --until-decided) runs
MAX_PLAN_ROUNDS = 1000
TIME_WINDOWS = 40  # the report page's latency-over-time windows per pass
EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 1, 2, 3
# 128 + the signal: Ctrl-C, a kill, and the terminal or SSH connection closing
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


# ==== records ====
# Every record is a `class X(NamedTuple)` with `NamedTuple` imported from here: mypy reads
# typing's (above), the run builds it with the class below, as typing does but without
# typing's check of each field's annotation, which under `from __future__ import annotations`
# compiles every annotation's text into a ForwardRef (a thousand compile() calls, a quarter
# of every start's instructions). Nothing reads a record's annotations but mypy; everything else a
# record has (fields, defaults, methods, docstring, module, repr, _replace, _asdict, pickling)
# is collections.namedtuple's, as typing's is: test_constants.py holds the two alike. What
# typing has and this has not, used nowhere here: __orig_bases__, __set_name__ on the body's
# attributes (3.13), a Generic record (3.11+), the call form NamedTuple("X", [...]).
# what a record's class body may not define, and what it defines that is not copied
RECORD_PROHIBITED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields",
                               "_field_defaults", "_make", "_replace", "_asdict", "_source"})
RECORD_SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})


class RecordMaker(type):
    """The run's typing.NamedTupleMeta: a class statement's fields, defaults and the rest of
    its body made into a collections.namedtuple, its annotations kept as written."""

    def __new__(cls, typename: str, bases: Tuple[type, ...], namespace: Dict[str, Any]) -> Any:
        if not bases:  # NamedTuple itself
            return super().__new__(cls, typename, bases, namespace)
        if bases != (NamedTuple,):
            raise TypeError("can only inherit from a NamedTuple type")
        types = namespace.get("__annotations__", {})
        default_names: List[str] = []
        for field_name in types:
            if field_name in namespace:
                default_names.append(field_name)
            elif default_names:
                raise TypeError(f"Non-default namedtuple field {field_name} cannot follow "
                                f"default field{'s' if len(default_names) > 1 else ''} "
                                f"{', '.join(default_names)}")
        # called through a name of its own: mypy reads a namedtuple() call as a record's
        # definition and asks for literal fields and defaults, which a record's class has
        namedtuple: Callable[..., Any] = collections.namedtuple
        record = namedtuple(typename, list(types), defaults=[namespace[n] for n in default_names],
                            module=namespace["__module__"])
        record.__annotations__ = record.__new__.__annotations__ = dict(types)
        for key, value in namespace.items():
            if key in RECORD_PROHIBITED:
                raise AttributeError("Cannot overwrite NamedTuple attribute " + key)
            if key not in RECORD_SPECIAL and key not in record._fields:
                setattr(record, key, value)
        return record


if not TYPE_CHECKING:
    class NamedTuple(metaclass=RecordMaker):
        """The base of every record when run: `class Interval(NamedTuple): ...`."""
