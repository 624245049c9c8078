"""What a router's answer means, read once as the pass loop gets it: its decision (classify,
the decision paths, the default route), its error kind and code, its one JSON value and what
keeps a body from being one (body_fault), its configuration hash, its per-signal times
(SignalTable), a selection the router sampled, and its degraded members. Pure: it reads
bytes and returns values; the client gets the bytes."""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from typing import (Any, Callable, cast, Dict, FrozenSet, List, Optional, Sequence, Tuple,
                    Union)

from .constants import ERROR_CODE_PATTERN, MAX_REASON_CHARS, MAX_SIGNALS, SIGNAL_NAME_PATTERN
from .errors import unique_names
from .words import scrubbed_cut
from .versions import SAMPLED_MARK
from .degraded import Degraded, DEGRADED_MEMBERS, DEGRADED_SIGNAL_CHARS
from .client import malformed, RequestFailed

__all__ = [
    "body_config_hash", "body_fault", "classify", "degraded_of", "error_code", "HeldAnswer",
    "Hold", "past_decision", "rest_of_object", "SignalTable", "SignalTimes",
]


BODY_CONFIG_HASH = re.compile(rb'"config_hash"\s*:\s*"([0-9a-f]{64})"')  # the body's own copy
BODY_CONFIG_HASH_KEY = b'"config_hash"'  # where every match of it starts
MAX_ANSWER_DEPTH = 64  # a decoded answer nested deeper is malformed (the router's: 4 levels)
DECISION_CHARS = 256  # a decision longer than this (an object, say) is stored cut, marked so
DECISION_CUT = "...[cut]"
NO_DECISION = "(none)"  # the decision of an answer routed by the default route


def nested_deeper(document: Any, limit: int) -> bool:
    """Return True when a decoded JSON value nests lists and objects more than limit deep."""
    level, depth = [document], 0
    while level:
        depth += 1
        if depth > limit:
            return True
        level = [child for value in level if isinstance(value, (dict, list))
                 for child in (value.values() if isinstance(value, dict) else value)
                 if isinstance(child, (dict, list))]
    return False


def decoded_answer(body: bytes | bytearray) -> Any:
    """Return the JSON value of an answer's body; raise ValueError when it is no JSON, and
    RequestFailed 'malformed' when it nests deeper than MAX_ANSWER_DEPTH."""
    try:
        document = json.loads(body)
    except RecursionError:
        raise malformed(f"JSON nested deeper than {MAX_ANSWER_DEPTH} levels") from None
    # fewer brackets than the limit cannot nest deeper: most answers skip the walk
    if body.count(b"{") + body.count(b"[") > MAX_ANSWER_DEPTH \
            and nested_deeper(document, MAX_ANSWER_DEPTH):
        raise malformed(f"JSON nested deeper than {MAX_ANSWER_DEPTH} levels")
    return document


# per decision path: (optional, its alternatives as key tuples: ("decision_result",
# "decision_name")), as decision_members plans them
DecisionPlan = Tuple[Tuple[bool, Tuple[Tuple[str, ...], ...]], ...]


@functools.lru_cache(maxsize=32)
def decision_members(paths: Tuple[str, ...]) -> Tuple[FrozenSet[str], DecisionPlan]:
    """Return, of decision paths, the names of the top-level members they read, and per path
    (optional, its alternatives as key tuples)."""
    plan = tuple((path.endswith("?"), tuple(tuple(alternative.split("."))
                                            for alternative in path.rstrip("?").split("|")))
                 for path in paths)
    return frozenset(keys[0] for _, alternatives in plan for keys in alternatives), plan


def decision_of(document: Any, paths: Sequence[str],
                secrets: Sequence[str] = ()) -> Optional[str]:
    """Return the routing decision of a response by decision paths, or None when absent.

    A path is dotted; alternatives joined with '|' take the first present; a path ending in
    '?' is optional. The found parts are joined with '|'. A part to be cut (decision_text)
    is scrubbed of the secrets first; one that is not is scrubbed by the caller.
    """
    found = []
    for optional, alternatives in decision_members(tuple(paths))[1]:
        value = None
        for keys in alternatives:
            value = document
            for key in keys:
                value = value.get(key) if isinstance(value, dict) else None
            if value is not None and value != "":
                break
        if value is None or value == "":
            if optional:
                continue
            return None
        found.append(value if type(value) is str and len(value) <= DECISION_CHARS
                     else decision_text(value, secrets))
    return "|".join(found) if found else None


def decision_settled(found: dict, plan: DecisionPlan) -> bool:
    """Return whether the members found so far settle every path as the whole document would:
    each path has a present value whose preceding alternatives were all found (empty), or all
    its alternatives were found."""
    for _, alternatives in plan:
        for keys in alternatives:
            if keys[0] not in found:
                return False
            value: Any = found  # then whatever JSON value the keys lead to
            for key in keys:
                value = value.get(key) if isinstance(value, dict) else None
            if value is not None and value != "":
                break
    return True


# the C scanner: one value from an index, and a key from just past its quote; both are in
# CPython's json but not in typeshed's stubs, hence getattr and the type spelled out
_scan_json: Callable[[str, int], tuple[Any, int]] = getattr(json.JSONDecoder(), "scan_once")
_scan_json_key: Callable[[str, int], tuple[str, int]] = getattr(json.decoder, "scanstring")
JSON_SPACE = " \t\n\r"
WHOLE_JSON_BYTES = 512  # answers up to this long are decoded whole
# a run of spaces, maybe empty: it matches at any index, so never None
_json_space = cast("Callable[..., re.Match[str]]", re.compile(r"[ \t\n\r]*").match)


DEFAULT_ROUTE_PATHS = ("decision_result.decision_name?",)
# (the named members of an answer read, None where they are read otherwise; where the read
# stopped): a plain tuple, as the readers run once an answer
MembersRead = Tuple[Optional[Dict[str, Any]], int]


class Hold:
    """A pass's hold of answers: `room`, the bytes it may still hold; `last`, the one held last."""

    __slots__ = ("room", "last")

    def __init__(self) -> None:
        self.room = 0
        self.last: Optional[HeldAnswer] = None


def answer_document(body: bytes | bytearray, paths: Sequence[str],
                    signals: Optional[SignalTable] = None, hold: Optional[Hold] = None) -> Any:
    """Return as much of a JSON answer as decision paths read: a dict of the top-level members
    they name, each decoded, read from the start until the paths are settled (the router puts
    decision_result and selected_model before its ~2 KB of metrics, which are then never
    decoded). Anything but a UTF-8 object of that plain form is decoded whole by
    decoded_answer, raising as it does; each member read is held to MAX_ANSWER_DEPTH as it
    would be. Past the decision the rest must be the rest of one JSON object (rest_of_object;
    else decoded whole, to say why); one nested too deep there is not seen. A member sent
    twice counts as first read, where json.loads keeps the last. A small body is decoded whole
    by the C scanner, faster than this reads its members.

    With `signals`, the answer's per-signal times are read too (scanned_members) and kept in
    signals.last; a body that is no JSON leaves it None, as classify set it before the call.
    With `hold`, while it has room, an answer read by its decision alone (its metrics after
    it) is held in hold.last: the rest (the one-JSON check, the times, what classify and
    degraded_of read past the decision) is read after its pass as it would be now
    (AnswerBook.settle). The hold is taken here, not in a call: the path of every answer."""
    try:
        text = body.decode()
        if len(body) <= WHOLE_JSON_BYTES:
            index = _json_space(text).end()
            document, index = _scan_json(text, index)
            # more brackets than the limit: it might nest too deep, decoded_answer judges it
            members: Any = document if not text[index:].strip(JSON_SPACE) and (
                body.count(b"{") + body.count(b"[") <= MAX_ANSWER_DEPTH) else None
        else:
            # decision_result too, read wherever it stands: default_route looks at it; with
            # the times, metrics where it comes before the decision (then read as below)
            members, at = read_members(text, decision_reading(tuple(paths)) if signals is None
                                       else decision_reading(tuple(paths), ("metrics",)))
            if members is not None and (signals is None or "metrics" not in members):
                if hold is not None:
                    # held while it fits, counted at the most its str may take (4 bytes a
                    # character): the answers held are those before the first that does not
                    size = len(text) if text.isascii() else 4 * len(text)
                    if size <= hold.room:
                        hold.room -= size
                        hold.last = [text, at]  # a HeldAnswer
                        return members
                    hold.room = 0
                if signals is not None:
                    members = scanned_members(text, at, members, tuple(paths), signals)
            if members is not None and not rest_of_object(text, at, signals):
                members = None  # not one JSON document: decoded whole, to say why
                if signals is not None:
                    signals.last = None  # no times of an answer refused
    except (ValueError, IndexError, StopIteration):  # UnicodeDecodeError is a ValueError
        members = None
    # json.loads says why, or reads what this does not: a BOM, UTF-16, encoded surrogates
    document = decoded_answer(body) if members is None else members
    if signals is not None and signals.last is None:
        signals.last = signals.times(document)
    return document


def rest_of_object(text: str, index: int, signals: Optional[SignalTable] = None) -> bool:
    """Return whether text from index, just past a value of its top-level object (where a
    read of the decision stopped), is the rest of that object and nothing more: members,
    each value read by the C scanner, the closing brace, then only spaces. Go's decoder
    refuses the rest otherwise (a second document after the first, a value broken past the
    decision: "x":tru), and so does this reader: the answer is then decoded whole, and
    bad_json. A value nested too deep for the scanner is decoded whole as well (malformed).
    With `signals`, a metrics member of the form its table read last is matched by that
    form's pattern rather than decoded (the router's ~1 KB of times: most of the cost);
    whether its numbers are JSON numbers is found where its times are read (SignalTable.scan:
    an answer whose are not is decoded, and bad_json there)."""
    form = signals.form if signals is not None else None
    try:
        while True:
            if text[index] in JSON_SPACE:
                index = _json_space(text, index).end()
            if text[index] == "}":
                return not text[index + 1:].strip(JSON_SPACE)
            if text[index] != ",":
                return False
            index = _json_space(text, index + 1).end()
            if text[index] != '"':
                return False
            name, index = _scan_json_key(text, index + 1)
            index = _json_space(text, index).end()
            if text[index] != ":":
                return False
            index = _json_space(text, index + 1).end()
            found = form.match(text, index) if form is not None and name == "metrics" else None
            index = found.end() if found is not None else _scan_json(text, index)[1]
    except (ValueError, IndexError, StopIteration, RecursionError):
        return False


def scanned_members(text: str, index: int, members: dict, paths: Tuple[str, ...],
                    signals: SignalTable) -> Optional[dict]:
    """Return the members of an answer whose decision members were read up to index, its
    per-signal times read now into signals.last (answer_document: it did not fit the hold).

    'metrics' past index is found and its times read by SignalTable.scan, without decoding
    anything, where the members between are plain JSON and metrics has the router's compact form
    (Go's, every signal's {"execution_time_ms":N,"confidence":N}). Anything else is decoded
    member by member up to metrics, so that what is malformed there is bad_json or malformed as
    it always was; signals.last is then left None for the caller to read the decoded metrics."""
    times = signals.scan(text, index)
    if times is not None:
        signals.last = times
        return members
    return top_members(text, *decision_members(paths + ("metrics?",) + DEFAULT_ROUTE_PATHS))[0]


def top_members(text: str, names: FrozenSet[str], plan: DecisionPlan) -> MembersRead:
    """Return (the named members of the JSON object in text, where the read stopped), reading
    from its start until the plan's paths are settled (the index is then just past the last
    value read); None for the members when text is not a plain object (a BOM, another value,
    an odd token). Raise ValueError, IndexError or StopIteration on malformed JSON,
    RequestFailed 'malformed' for a member read that nests deeper than MAX_ANSWER_DEPTH."""
    index = _json_space(text).end()
    if text[index] != "{" or not text.rstrip(JSON_SPACE).endswith("}"):
        return None, index  # not an object, or one cut short: decoded whole, to say why
    found: dict = {}
    index = _json_space(text, index + 1).end()
    if text[index] == "}":
        return (found if not text[index + 1:].strip(JSON_SPACE) else None), index
    while text[index] == '"':
        name, index = _scan_json_key(text, index + 1)
        if text[index] != ":":  # a compact answer (Go's, Python's) has no spaces to skip
            index = _json_space(text, index).end()
            if text[index] != ":":
                return None, index
        index += 1
        if text[index] in JSON_SPACE:
            index = _json_space(text, index).end()
        start = index
        value, index = _scan_json(text, index)
        # a value with fewer brackets than the depth limit cannot nest that deep
        if index - start >= 2 * MAX_ANSWER_DEPTH and isinstance(value, (dict, list)) \
                and text.count("[", start, index) + text.count("{", start, index) \
                >= MAX_ANSWER_DEPTH and nested_deeper(value, MAX_ANSWER_DEPTH - 1):
            raise malformed(f"JSON nested deeper than {MAX_ANSWER_DEPTH} levels")
        if name in names:
            found[name] = value
            if decision_settled(found, plan):
                return found, index
        if text[index] != ",":
            index = _json_space(text, index).end()
            if text[index] == "}":
                return (found if not text[index + 1:].strip(JSON_SPACE) else None), index
            if text[index] != ",":
                return None, index
        index += 1
        if text[index] in JSON_SPACE:
            index = _json_space(text, index).end()
    return None, index


# decision_reading's (names, plan, each path's first name as '"name":', the pattern of an
# escape that may spell a name, the cache of prefixes read): a plain tuple, as
# leading_members unpacks it once an answer (a tuple subclass unpacks by the slow path)
DecisionReading = Tuple[FrozenSet[str], DecisionPlan, Tuple[str, ...], "re.Pattern[str]",
                        Dict[str, Any]]


@functools.lru_cache(maxsize=32)
def decision_reading(paths: Tuple[str, ...], also: Tuple[str, ...] = ()) -> DecisionReading:
    """Return how leading_members reads answers by decision paths (with DEFAULT_ROUTE_PATHS):
    decision_members' names (and the names `also` kept where they come before the decision)
    and plan, each path's first alternative's top-level name as it stands before its value
    ('"name":'), a pattern finding a \\u escape that may spell a character of a name (a
    member named by escapes), and the cache of prefixes read."""
    names, plan = decision_members(paths + DEFAULT_ROUTE_PATHS)
    names = names | frozenset(also)
    firsts = tuple(f'"{alternatives[0][0]}":' for _, alternatives in plan)
    spelled = {char for name in names for char in name}
    if all(" " <= char < "\x7f" and char not in '"\\/' for char in spelled):
        escape = re.compile(r"\\u00(?:%s)" % "|".join(f"{ord(c):02x}" for c in sorted(spelled)),
                            re.IGNORECASE)
    else:  # a name spelled otherwise: any escape may spell it
        escape = re.compile(r"\\")
    return names, plan, firsts, escape, {}


LEADING_CACHE_ENTRIES = 512  # prefixes of answers remembered per decision paths


def leading_members(text: str, reading: DecisionReading) -> MembersRead:
    """Return (top_members' named members of a compact answer (Go's) read in one call of the C
    scanner, or None for top_members to read it; where the read stopped, just past the last
    value read). The prefix read runs from the object's first
    member (a string under a name not read: the router's original_text, the one member that
    differs with every prompt) to the value of the last of the paths' first alternatives
    (found by a search of each name); the prefix past the first member is the key of a cache,
    so an answer whose decision and model were seen before costs the searches and a lookup.

    top_members stops at the first member that settles the paths, and none settles them
    before every first alternative's name was read: so when the prefix, decoded whole (its
    first member checked on its own), settles them, top_members would have read that same
    prefix, member by member, and kept the same values (the last of a name sent twice in it,
    as json does). Where a name may be spelled by escapes (found earlier than its search
    says), where the prefix holds MAX_ANSWER_DEPTH brackets or does not settle the paths, or
    anything is malformed, top_members reads the answer and judges it as it always has. The
    dict may be shared by answers: read it only."""
    names, plan, firsts, escape, cache = reading
    if text[:2] != '{"' or not text.endswith(("}", "}\n")):  # else top_members says why
        return None, 0
    try:
        name, index = _scan_json_key(text, 2)
        if name in names or text[index:index + 2] != ':"':
            return None, 0
        start = _scan_json_key(text, index + 2)[1]  # the first member's string, checked
        cut = start
        for first in firsts:
            at = text.find(first, start)
            if at < 0:
                return None, 0
            cut = max(cut, at + len(first))
        end = _scan_json(text, cut)[1]
    except (ValueError, IndexError, StopIteration, RecursionError):
        return None, 0  # top_members reads it, raising where it does
    rest = text[start:end]
    members = cache.get(rest)
    if members is None:
        if len(cache) >= LEADING_CACHE_ENTRIES:
            cache.clear()
        members = cache[rest] = prefix_members(rest, names, plan, escape)
    return members or None, end


def read_members(text: str, reading: DecisionReading) -> MembersRead:
    """Return (the members of an answer by a decision_reading, where the read stopped):
    leading_members' one read of a compact answer, else top_members' member by member."""
    members, index = leading_members(text, reading)
    return (members, index) if members is not None else top_members(text, *reading[:2])


def prefix_members(rest: str, names: FrozenSet[str], plan: DecisionPlan,
                   escape: re.Pattern[str]) -> Any:
    """Return the named members of the object '{' + rest[1:] + '}' (rest: the members after
    the first, from its comma) when they settle the plan and nothing in rest may spell a
    name by escapes or nest MAX_ANSWER_DEPTH deep; else False (leading_members)."""
    if rest[:1] != "," or escape.search(rest) is not None \
            or rest.count("{") + rest.count("[") >= MAX_ANSWER_DEPTH - 1:
        return False
    prefix = "{" + rest[1:] + "}"
    try:
        document, end = _scan_json(prefix, 0)
    except (ValueError, IndexError, StopIteration, RecursionError):
        return False
    members = {name: document[name] for name in names if name in document}
    return members if end == len(prefix) and decision_settled(members, plan) else False


def error_code(body: bytes | bytearray) -> Optional[str]:
    """Return the router's code of a failed answer: error.code of its error envelope
    {"error": {"code", "message"}}; 'decision_error' for the 503 that carries a partial
    preview answer with a decision_error instead; else None."""
    try:
        document = decoded_answer(body)
    except (ValueError, RequestFailed):  # the status already says the request failed
        return None
    if not isinstance(document, dict):
        return None
    envelope = document.get("error")
    code = envelope.get("code") if isinstance(envelope, dict) else None
    if code is None and isinstance(document.get("decision_error"), str) \
            and document["decision_error"]:
        code = "decision_error"
    return code if isinstance(code, str) and ERROR_CODE_PATTERN.fullmatch(code) else None


def body_config_hash(body: bytes | bytearray) -> Optional[str]:
    """Return the config_hash a preview answer's body carries, or None: read when the
    x-vsr-config-hash header is missing (a proxy that drops it), by a byte search, since the
    pass loop must not parse an answer twice: the first place BODY_CONFIG_HASH matches, each
    place its key stands tried in turn (bytes.find skips through a body many times faster
    than the pattern's own search, which costs a 1.5 KB answer 11,000 instructions)."""
    at = body.find(BODY_CONFIG_HASH_KEY)
    while at >= 0:
        found = BODY_CONFIG_HASH.match(body, at)
        if found is not None:
            return found.group(1).decode("ascii")
        at = body.find(BODY_CONFIG_HASH_KEY, at + 1)
    return None


def decision_text(value: Any, secrets: Sequence[str] = ()) -> str:
    """Return a decision as stored: a string as it is, anything else as compact JSON; either
    scrubbed of the secrets, then cut to DECISION_CHARS characters and marked, so that no
    record holds a whole document, nor a part of a secret the cut split."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True,
                                                          separators=(",", ":"))
    return scrubbed_cut(text, DECISION_CHARS, secrets, DECISION_CUT)


# SignalTable.scan reads the router's metrics object in the form Go's encoding/json writes
# it, {"<signal>":{"execution_time_ms":N,"confidence":N},...}, without decoding it: a pattern
# made once for each sequence of signal names (a SignalForm) matches the object, its names
# and marks exactly and its numbers by their characters, and gives the numbers' texts; one
# call of the C scanner reads those of many answers, and so finds whether each is a JSON
# number. An object of names not seen is found by its skeleton (the object less the numbers'
# characters), decoded once to make its pattern. (A pattern that told JSON numbers apart
# itself costs the regular expression engine twice as much: each optional part nests the
# rest of the match a level deeper. One text of a signal's two numbers and the mark between
# would need the mark replaced, and str.replace searches a long text anew for each mark.)
METRICS_KEY = ',"metrics":'
NUMBER_BYTES = b"0123456789.-+"
SIGNAL_NUMBERS = r'([0-9.]+),"confidence":([-0-9.]+)'  # a time is not negative
MAX_SIGNAL_MS = 1e11  # a time this long or longer is decoded (see _signal_times)
_MANY_DECIMALS = re.compile(r"\.[0-9]{5}")  # a time that round(ms, 4) changes
_NONE_FOR_ZERO = {0: None}.get  # a time of 0: a signal the router did not evaluate


# An answer held by its pass (Hold): [the whole answer decoded, where the read of its decision
# stopped]. A list, as a list costs a tenth of the instructions of the cheapest tuple subclass;
# times are always a tuple, never a list: AnswerBook.settle tells the two apart by type
HeldAnswer = list
# an answer's per-signal times in its SignalTable's order, None for a signal not evaluated
SignalTimes = Tuple[Optional[float], ...]


class SignalForm:
    """A metrics object's sequence of signal names: the pattern that matches such an object
    in the router's compact form, and where each of a SignalTable's names stands in it (as
    the table was when `size` names long: names are only ever added)."""

    __slots__ = ("names", "match", "positions", "new", "size")

    def __init__(self, names: Tuple[str, ...]) -> None:
        self.names = names
        entries = (f'"{re.escape(name)}":\\{{"execution_time_ms":{SIGNAL_NUMBERS}\\}}'
                   for name in names)
        self.match = cast("Callable[[str, int], Optional[re.Match[str]]]",
                          re.compile("\\{%s\\}" % ",".join(entries)).match)
        self.positions: Tuple[int, ...] = ()  # per table name: its entry (len(names): none)
        self.new: Tuple[int, ...] = ()  # the entries whose names the table lacks, while room
        self.size = -1  # the table's length when positions and new were found

    def place(self, table: SignalTable) -> None:
        """Find where the table's names stand in this object, and which of its are new."""
        where = {name: i for i, name in enumerate(self.names)}
        self.positions = tuple(where.get(name, len(self.names)) for name in table.names)
        self.new = () if len(table.names) >= MAX_SIGNALS else tuple(
            i for name, i in where.items() if name not in table.index)
        self.size = len(table.names)


class SignalTable:
    """The signal names of a run in the order first reported, and each answer's times in
    that order: names are added as answers report them, up to MAX_SIGNALS."""

    FORMS = 64  # the distinct name sequences of metrics objects remembered

    def __init__(self) -> None:
        self.names: list = []
        self.index: dict = {}
        # the times found in the answer read last (None: not read, or held: Hold)
        self.last: Optional[SignalTimes] = ()
        self.forms: dict = {}  # a metrics object's skeleton -> its SignalForm
        self.form: Optional[SignalForm] = None  # the form of the object read last

    def times(self, document: Any) -> SignalTimes:
        """Return an answer's metrics.<signal>.execution_time_ms in the table's order, None
        for a signal it did not report; a time of 0 is a signal the router did not evaluate
        (its metrics object lists every signal it knows, 0 for the rest)."""
        metrics = document.get("metrics") if type(document) is dict else None
        if type(metrics) is not dict:
            return ()
        found: list = []
        index = self.index
        # compress keeps the entries that are not 0 (or empty) without a line of Python each
        for name, entry in itertools.compress(metrics.items(), metrics.values()):
            ms = entry.get("execution_time_ms") if type(entry) is dict else None
            if ms is None or type(ms) not in (float, int) or not 0 < ms < math.inf:
                continue
            i = index.get(name)
            if i is None:
                i = self._add(name)
                if i is None:
                    continue
            if i >= len(found):
                found += [None] * (i + 1 - len(found))
            found[i] = round(ms, 4)
        return tuple(found)

    def _add(self, name: Any) -> Optional[int]:
        """Add a name first reported; return its place, None where it is not a signal name
        or the table is full."""
        if len(self.names) >= MAX_SIGNALS or type(name) is not str \
                or not SIGNAL_NAME_PATTERN.fullmatch(name):
            return None
        i = self.index[name] = len(self.names)
        self.names.append(name)
        return i

    def scan(self, text: str, index: int) -> Optional[SignalTimes]:
        """Return what times() returns of the answer in text, reading its top-level metrics
        member that follows index (where a read of its decision stopped, just past a value
        at the top level) without decoding the answer; None where this cannot tell, and the
        answer is to be decoded up to metrics instead.

        Between index and metrics only members without an escape may stand, their quotes
        paired and, outside their strings, as many brackets closed as opened (metrics is then
        a top-level key: the router's recommended_models list stands there), not checked
        further, as no member past the decision is. The metrics object must be the router's
        compact form exactly, matched by its names' SignalForm, its numbers JSON numbers
        without an exponent, every time under MAX_SIGNAL_MS."""
        return self.scan_many([[text, index]])[0]

    def scan_many(self, answers: Sequence[HeldAnswer],
                  again: Optional[Callable[[int], None]] = None
                  ) -> List[Optional[SignalTimes]]:
        """Return scan() of each answer, as if scanned one after another (AnswerBook.settle
        reads a pass's held answers so): the times of all of them read in one step of the
        C scanner, and rounded in one step. `again(i)`, where given, is called in turn for
        each answer the scan cannot read (it is decoded instead), so that the names it
        reports take their place among the others'."""
        read = [self._number_texts(text, index) for text, index in answers]
        times = _signal_times([one[1] for one in read if one])
        found: List[Optional[SignalTimes]] = []
        offset = 0
        for i, one in enumerate(read):
            # (): metrics {}; None: not read
            result: Optional[SignalTimes] = () if one == () else None
            if one:
                form, texts = one
                if times is not None:
                    mine: Optional[list] = times[offset:offset + len(form.names)]
                    offset += len(form.names)
                else:  # one of them is not numbers as the form takes them: which?
                    mine = _signal_times([texts])
                if mine is not None:
                    result = self._found(mine, form)
            if result is None and again is not None:
                again(i)
            found.append(result)
        return found

    def _number_texts(self, text: str,
                      index: int) -> Union[Tuple[SignalForm, Tuple[str, ...]], Tuple[()], None]:
        """Return (the SignalForm of the metrics object past index (see scan), the texts of
        its numbers, a time and a confidence per signal), () for an empty object, None where
        it is not of the compact form."""
        at = text.find(METRICS_KEY, index)
        if at < 0:
            return None
        between = text[index:at]
        if "\\" in between or between.count('"') % 2 or (
                ("{" in between or "[" in between) and not _balanced(between)):
            return None
        start = at + len(METRICS_KEY)
        if text.startswith("{}", start):
            return ()
        form = self.form  # most answers have the form of the one before
        found = form.match(text, start) if form is not None else None
        if found is None:
            end = text.find("}}", start) + 2
            if end < 2:
                return None
            body = text[start:end].encode()
            skeleton = body.translate(None, NUMBER_BYTES)
            form = self.forms.get(skeleton) or self._form(body, skeleton)
            found = form.match(text, start) if form is not None else None
            if found is None:
                return None
            self.form = form
        assert form is not None  # found: matched by a form (a test, not a call, once an answer)
        return form, found.groups()

    def _found(self, times: List[Optional[float]], form: SignalForm) -> SignalTimes:
        """Return scan()'s tuple of one answer's execution_time_ms values (None for 0),
        read in its metrics object's order, by its form."""
        if form.size != len(self.names):
            form.place(self)
        first = list(map(times.__getitem__, form.new))  # the times of names not in the table
        if first.count(None) != len(first):  # signals reported for the first time
            for i in form.new:  # in the object's order, as times() adds them
                if times[i] is not None:
                    self._add(form.names[i])
            form.place(self)
        times.append(None)  # the time of a signal the answer does not list
        found = tuple(map(times.__getitem__, form.positions))
        end = len(found)
        while end and found[end - 1] is None:
            end -= 1
        return found if end == len(found) else found[:end]

    def _form(self, body: bytes, skeleton: bytes) -> Optional[SignalForm]:
        """Return, and remember by its skeleton, the SignalForm of a metrics object whose
        skeleton is not among those seen; None for an object that is not the router's
        compact form of distinct signal names free of the numbers' characters (it is then
        decoded)."""
        names = form_names(body)
        if names is None:
            return None
        if len(self.forms) >= self.FORMS:
            self.forms.clear()
        self.forms[skeleton] = form = SignalForm(names)
        return form


def _signal_times(answers: Sequence[Tuple[str, ...]]) -> Optional[List[Optional[float]]]:
    """Return the times of the metrics objects whose numbers' texts these are (SignalTable's
    _number_texts: per signal a time and a confidence), one object after another, read in one call
    of the C scanner (an int where a text has no decimals, as json reads it), rounded as
    SignalTable.times rounds them, None for 0; None where one of the texts is not a JSON
    number, or a time is MAX_SIGNAL_MS or longer (such an object is decoded)."""
    texts = list(itertools.chain.from_iterable(answers))
    if not texts:
        return []
    text = ",".join(texts)
    try:
        values, stop = _scan_json(f"[{text}]", 0)
    except (ValueError, StopIteration):  # a text that is not a JSON number
        return None
    times = values[0::2]  # every signal's numbers are a time and a confidence
    if stop != len(text) + 2 or len(values) != len(texts) or max(times) >= MAX_SIGNAL_MS:
        return None
    times = list(map(_NONE_FOR_ZERO, times, times))  # before rounding: 0.00001 was evaluated
    # round(ms, 4) is the identity for a time of 4 decimals or fewer under 1e11 (an ulp
    # there is far below 0.00005; the router's times have 3: microseconds / 1000), so all
    # are rounded only where one has more
    if _MANY_DECIMALS.search(",".join(texts[0::2])) is not None:
        times = [ms if ms is None else round(ms, 4) for ms in times]
    return times


def _balanced(between: str) -> bool:
    """Return whether a JSON text free of escapes closes, outside its strings, as many
    objects and arrays as it opens (its quotes paired, its strings are every other part)."""
    outside = "".join(between.split('"')[0::2])
    return outside.count("{") == outside.count("}") and outside.count("[") == outside.count("]")


def form_names(body: bytes) -> Optional[Tuple[str, ...]]:
    """Return the signal names of a metrics object in the router's compact form, in order;
    None for any other object, or names that are not distinct signal names free of the
    characters of numbers and of the form's marks."""
    try:
        metrics = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if type(metrics) is not dict:
        return None
    names = tuple(metrics)
    if any(not SIGNAL_NAME_PATTERN.fullmatch(name) or set(name.encode()) & set(
            NUMBER_BYTES + b'":,}') for name in names):
        return None
    form = b",".join(b'"%s":{"execution_time_ms":,"confidence":}' % name.encode()
                     for name in names)
    # the skeleton of these names: numbers alone may differ from it
    return names if b"{%s}" % form == body.translate(None, NUMBER_BYTES) else None


def default_route(document: Any, paths: Sequence[str],
                  secrets: Sequence[str] = ()) -> Optional[str]:
    """Return the decision of an answer routed by the default route: the router's 200 with
    decision_result.decision_name "" when no decision matched (NO_DECISION, with the optional
    paths' parts such as selected_model when present); None for any other answer."""
    result = document.get("decision_result") if isinstance(document, dict) else None
    if not isinstance(result, dict) or result.get("decision_name") != "":
        return None
    extra = decision_of(document, [path for path in paths if path.endswith("?")], secrets)
    return NO_DECISION + (f"|{extra}" if extra else "")


def classify(status: int, body: bytes | bytearray, paths: Sequence[str],
             signals: Optional[SignalTable] = None, secrets: Sequence[str] = (),
             hold: Optional[Hold] = None) -> Tuple[Optional[str], Optional[str],
                                                   Optional[str]]:
    """Return (decision, error kind, the router's error code) for one answered request (a plain
    tuple: this runs once an answer, and a record costs thousands of instructions); raise
    RequestFailed 'malformed' for an answer nested deeper than MAX_ANSWER_DEPTH.

    A 200 whose decision_result names no decision is routed (the default route, NO_DECISION);
    one with no decision_result at all, or an empty body, is no_decision: the router answers
    so while its classifiers are not loaded. With `signals`, the answer's per-signal times are
    read in the same read (answer_document) and left in signals.last (None: not read, as for
    an answer whose body is not read: an error status, an empty body), never those of the
    answer before it. With `hold`, an answer held (hold.last) has its decision read, not yet
    marked sampled (past_decision). The pass loop gives the arguments in order (keywords cost)."""
    if signals is not None:
        signals.last = None
    if hold is not None:
        hold.last = None
    if status >= 300:
        kind = "http_5xx" if status >= 500 else "http_4xx" if status >= 400 else "http_3xx"
        return None, kind, error_code(body)
    if not body or body.isspace():  # as `not body.strip()`, without copying the body
        return None, "no_decision", None
    try:
        document = answer_document(body, paths, signals, hold)
    except ValueError:  # UnicodeDecodeError is one
        return None, "bad_json", None
    decision = decision_of(document, paths, secrets)  # routed_decision, written out
    if decision is None:
        decision = default_route(document, paths, secrets)
        if decision is None:
            return None, "no_decision", error_code(body)
    if hold is not None and hold.last is not None:
        return decision, None, None  # held: marked sampled after the pass, where it is
    return marked_sampled(decision, document, body), None, None


def routed_decision(document: Any, paths: Sequence[str],
                    secrets: Sequence[str] = ()) -> Optional[str]:
    """Return an answer's decision by its paths (decision_of), else by the default route."""
    decision = decision_of(document, paths, secrets)
    return decision if decision is not None else default_route(document, paths, secrets)


# ---- sampled selections: a selected model the router sampled or chose by its state ----

PROVENANCE_KEY = b'"selection_provenance"'
PROVENANCE = re.compile(rb'"selection_provenance"\s*:\s*(\{[^{}]*\})')


def is_sampled_selection(document: Any) -> bool:
    """Return whether an answer's selected model was sampled or depends on the router's
    state (selection_provenance.sampled or .state_dependent true): another sending of the
    same prompt may select another model with the same decision."""
    provenance = document.get("selection_provenance") if isinstance(document, dict) else None
    return isinstance(provenance, dict) and (provenance.get("sampled") is True
                                             or provenance.get("state_dependent") is True)


def marked_sampled(decision: str, document: Any, body: bytes | bytearray) -> str:
    """Return a decision key with its selected model marked SAMPLED_MARK where the answer
    says the router sampled it or chose it by its state (is_sampled_selection): the model is
    the key's last part, read from the answer's selected_model. A byte search first: most
    answers carry no selection_provenance, and the pass loop reads each answer once."""
    if body.find(PROVENANCE_KEY) < 0:
        return decision
    found = PROVENANCE.search(body)
    try:
        if found is not None:
            provenance = json.loads(found.group(1))
        else:  # not a flat object (one nested in it): the answer decoded whole, rarely
            whole = json.loads(body)
            provenance = whole.get("selection_provenance") if isinstance(whole, dict) else None
    except (ValueError, UnicodeDecodeError, RecursionError):
        return decision
    model = document.get("selected_model") if isinstance(document, dict) else None
    head, _, last = decision.rpartition("|")
    if not is_sampled_selection({"selection_provenance": provenance}) or not head \
            or not isinstance(model, str) or last != model:
        return decision
    return f"{head}|{SAMPLED_MARK}{model}"


# ---- degraded answers: the members that make a 200 no plain success ----

# the members' names as they stand before their value in any JSON: a body without any of
# them (and without a \u escape that may spell a letter or '_' of one) has none; one search
# for '"signal_error' finds both signal_errors and signal_error_matches (a search less)
_MARKS = (b'"signal_error', b'"applied_unknown_policies"', b'"decision_error"')
_SPELLED = re.compile(rb"\\u00(?:5[fF]|6[1-9a-fA-F]|7[0-9aA])")


def _kept(text: Any, limit: int, secrets: Sequence[str]) -> str:
    """Return a value as kept: text (anything else as JSON), secrets hidden, cut to limit."""
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    return scrubbed_cut(text, limit, secrets)


# the signal a member is kept under when the router named none: an empty key, or a member
# that is not the router's object of signals
UNNAMED_SIGNAL = "(unnamed)"


def degraded_of(body: bytes | bytearray, secrets: Sequence[str] = ()) -> Optional[Degraded]:
    """Return the degraded members of a 200 answer's body, () for a plain answer; None for a
    body that names one of them but is no JSON object (bad_json: what it says past its
    decision cannot be read). The body is searched for the members' names first, so that a
    plain answer costs a few byte searches and is never decoded again; one that names them
    is decoded whole, since the decision's fast reading (answer_document) stops before
    them. At most MAX_SIGNALS entries a member are kept, secrets hidden."""
    # rfind: CPython's reverse search skips through a router's 2 KB answer three times
    # faster than `in` (its forward search), 0.8 us a name here (bench/degraded_read.py)
    first, second, third = _MARKS
    if body.rfind(first) < 0 and body.rfind(second) < 0 and body.rfind(third) < 0 and (
            body.rfind(b"\\u00") < 0 or _SPELLED.search(body) is None):
        return ()
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(document, dict):
        return None
    found = []
    for member in DEGRADED_MEMBERS:
        value = document.get(member)
        if value is None or value == "" or value == {} or value == []:
            continue
        if member == "decision_error":
            found.append((member, "", _kept(value, MAX_REASON_CHARS, secrets)))
            continue
        if not isinstance(value, dict):  # not the router's {signal: text}: kept under a name
            value = {UNNAMED_SIGNAL: value}
        signals = sorted(value)[:MAX_SIGNALS]
        # unique once cut: the run file keeps them as keys of one object
        names = unique_names([_kept(signal, DEGRADED_SIGNAL_CHARS, secrets) or UNNAMED_SIGNAL
                              for signal in signals], DEGRADED_SIGNAL_CHARS)
        found += [(member, name, _kept(value[signal], MAX_REASON_CHARS, secrets))
                  for signal, name in zip(signals, names)]
    return tuple(found)


def past_decision(text: str, paths: Sequence[str], secrets: Sequence[str] = ()
                  ) -> Optional[Tuple[Degraded, Optional[str]]]:
    """Return what a held answer with a decision says past it (its rest one JSON document:
    rest_of_object), read after its pass as classify and degraded_of would have in it: (its
    degraded members, its decision marked as a sampled selection, secrets hidden where cut,
    None where unmarked); None where it names a degraded member but is no JSON (bad_json)."""
    body = text.encode()
    degraded = degraded_of(body, secrets)
    if degraded is None:
        return None
    if body.find(PROVENANCE_KEY) < 0:  # most answers: marked_sampled's own first search
        return degraded, None
    # the decision again, from the members the pass read (leading_members' cache)
    document = read_members(text, decision_reading(tuple(paths)))[0]
    decision = routed_decision(document, paths, secrets)
    marked = marked_sampled(decision, document, body) if decision is not None else None
    return degraded, (marked if marked != decision else None)


# ---- the one-JSON check: what keeps a body from being read, in words ----

# the first bytes of the compressed bodies a router or a proxy may send unasked (the tool asks
# for none): gzip, zlib (deflate), zstd
COMPRESSED_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\x78\x01", "deflate"), (b"\x78\x5e", "deflate"),
                    (b"\x78\x9c", "deflate"), (b"\x78\xda", "deflate"),
                    (b"\x28\xb5\x2f\xfd", "zstd"))


def body_fault(body: bytes) -> str:
    """Return what keeps an answer's body from being read as JSON, in words: compressed,
    not UTF-8, not JSON (and where), or more than one JSON document; "" when it reads.
    Nothing of the body itself is quoted: it may hold what a secret became."""
    for magic, name in COMPRESSED_MAGIC:
        if body.startswith(magic):
            return (f"a {name}-compressed body (Content-Encoding: {name}?), which the tool does "
                    f"not decompress: the router or a proxy before it compresses unasked")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"a body that is not UTF-8 (byte {exc.start} of {len(body):,})"
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            return (f"a body that is more than one JSON document (more after character "
                    f"{exc.pos:,} of {len(text):,})")
        return f"a body that is not JSON ({exc.msg}: character {exc.pos:,} of {len(text):,})"
    except (ValueError, RecursionError) as exc:
        return f"a body that is not JSON ({exc.__class__.__name__})"
    return ""
