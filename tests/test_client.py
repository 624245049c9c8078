"""Tests of client.py: the HTTP/1.1 client: endpoints, request bytes, the response parser."""

import gc
import json
import socket
import threading
import time

import pytest

from router_latency.constants import CONFIG_HASH_HEADER
from router_latency.runfile import load_run
from router_latency.client import (Connection, encode_request, MAX_BODY_BYTES, parse_endpoint,
                                   RequestFailed, ResponseReader)
from router_latency.meaning import SignalTable
from router_latency.passloop import (arrival_schedule, encode_prompts, PASS_HEADERS, PassLoop,
                                     PassPlan, Target)
from router_latency.simulator import simulated_decision
from conftest import answer_with_head, final_answer, OK, ScriptedServer, write_corpus


HASH_A, HASH_B = "a" * 64, "b" * 64


def feed_pieces(data, pieces=None):
    """Feed a reader data whole, or in pieces of that many bytes; return it once complete."""
    reader = ResponseReader()
    size = pieces or len(data)
    for start in range(0, len(data), size):
        if reader.feed(data[start:start + size]):
            assert start + size >= len(data), "complete before the last piece"
            return reader
    raise AssertionError("not complete")


def refused(data, pieces=None):
    """Feed data whole (or in pieces of that size); return the RequestFailed it raised."""
    with pytest.raises(RequestFailed) as failure:
        feed_pieces(data, pieces)
    return failure.value


@pytest.mark.parametrize("data,reason", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n{}", "Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1" + b"0" * 19 + b"\r\n\r\n{}", "Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n{}", "Content-Length"),
    (b"HTTP/1.1 " + b"2" * 5000 + b" OK\r\nContent-Length: 2\r\n\r\n{}", "status code"),
    (b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n{}", "status code"),
    (b"HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\n{}", "status code"),
    (b"HTTP/1.1 200 OK\r\nno colon\r\nContent-Length: 2\r\n\r\n{}", "without a colon"),
    (b"HTTP/2 200 OK\r\nContent-Length: 2\r\n\r\n{}", "not an HTTP/1.x status line"),
])
@pytest.mark.parametrize("pieces", [None, 1, 4096])
def test_lengths_and_status_codes_are_bounded(data, reason, pieces):
    failure = refused(data, pieces)
    assert failure.kind == "malformed" and reason in failure.detail


def test_leading_zeros_are_no_digits_of_a_length():
    reader = feed_pieces(b"HTTP/1.1 200 OK\r\nContent-Length: " + b"0" * 40 + b"2\r\n\r\n{}")
    assert reader.body == b"{}"


@pytest.mark.parametrize("head", [
    [b"Content-Length:", b" %d" % len(OK)],
    [b"Content-Length: %d" % len(OK), b"X-Note: one", b"\tand two"],
    [b"Transfer-Encoding:", b"  chunked"],
])
@pytest.mark.parametrize("pieces", [None, 1])
def test_a_folded_header_line_is_unfolded(head, pieces):
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(OK), OK) if b"Transfer-Encoding:" in head else OK
    reader = feed_pieces(answer_with_head([b"\r\n".join(head)], body), pieces)
    assert reader.status == 200 and reader.body == OK


@pytest.mark.parametrize("pieces", [None, 4096, 65536])
def test_one_head_limit_however_the_head_arrives(pieces):
    too_long = answer_with_head([b"X-Big: " + b"x" * 70_000, b"Content-Length: 2"], b"{}")
    failure = refused(too_long, pieces)
    assert failure.kind == "malformed" and "head is over 65,536 bytes" in failure.detail
    fits = answer_with_head([b"X-Big: " + b"x" * 60_000, b"Content-Length: 2"], b"{}")
    assert feed_pieces(fits, pieces).body == b"{}"


@pytest.mark.parametrize("size", [b"0x2", b"4_1", b"+2", b" 2", b"2 x", b"-2", b"", b"\xff",
                                  b"1" * 17])
@pytest.mark.parametrize("pieces", [None, 1])
def test_a_chunk_size_is_hex_digits_only(size, pieces):
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%s\r\n{}\r\n0\r\n\r\n" % size
    failure = refused(data, pieces)
    assert failure.kind == "malformed" and "chunk size" in failure.detail


@pytest.mark.parametrize("line", [b"2", b"2;name=value", b"2 ;x", b"2\t", b"0002"])
def test_chunk_extensions_and_whitespace_before_them_are_read(line):
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%s\r\n{}\r\n0\r\n\r\n" % line
    assert feed_pieces(data, 1).body == b"{}"


LF_OK = len(OK)


@pytest.mark.parametrize("data", [
    b"HTTP/1.1 200 OK\nContent-Length: %d\n\n%s" % (LF_OK, OK),
    b"HTTP/1.1 200 OK\r\nContent-Length: %d\n\r\n%s" % (LF_OK, OK),
    b"HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\nContent-Length: %d\n\n%s" % (LF_OK, OK),
    b"HTTP/1.1 200 OK\nX-Note: a\n\tb\nContent-Length: %d\n\n%s" % (LF_OK, OK),
    b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n%x;x=y\n%s\r\n0\nT: 1\n\n" % (LF_OK, OK),
])
@pytest.mark.parametrize("pieces", [None, 1, 7])
def test_lines_ended_by_a_bare_lf_are_read_as_gos_client_reads_them(data, pieces):
    reader = feed_pieces(data, pieces)  # RFC 9112 2.2; today such an answer waits to time out
    assert reader.status == 200 and bytes(reader.body) == OK


@pytest.mark.parametrize("pieces", [None, 1])
def test_chunk_data_needs_its_crlf_as_gos_client_asks(pieces):
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\n0\r\n\r\n" % (
        LF_OK, OK)
    failure = refused(data, pieces)
    assert failure.kind == "malformed" and "CRLF" in failure.detail


def feed_bytewise(data, reader=None):
    """Feed data one byte at a time; return the reader and whether it completed."""
    reader = reader or ResponseReader()
    for i in range(len(data)):
        if reader.feed(data[i:i + 1]):
            assert i == len(data) - 1, "complete before the last byte"
            return reader, True
    return reader, False


def test_reader_content_length_fed_byte_by_byte():
    reader, complete = feed_bytewise(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                                     % (len(OK), OK))
    assert complete and reader.status == 200 and reader.body == OK and reader.keep_open


def test_reader_chunked_with_extensions_and_trailers():
    data = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5;ext=1\r\n" + OK[:5] + b"\r\n" + b"%x\r\n" % (len(OK) - 5) + OK[5:] + b"\r\n"
            b"0\r\nX-Trailer: yes\r\n\r\n")
    reader, complete = feed_bytewise(data)
    assert complete and reader.body == OK
    one_piece = ResponseReader()
    assert one_piece.feed(data) and one_piece.body == OK


def test_reader_body_to_the_close_and_http10():
    reader, complete = feed_bytewise(b"HTTP/1.0 200 OK\r\n\r\n" + OK)
    assert not complete and not reader.keep_open
    assert reader.eof() and reader.body == OK
    alive = ResponseReader()
    assert alive.feed(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}")
    assert alive.keep_open


@pytest.mark.parametrize("head,keep_open", [
    (b"HTTP/1.1 204 No Content\r\n\r\n", True),
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", False),
])
def test_reader_bodyless_and_closing_answers(head, keep_open):
    reader = ResponseReader()
    assert reader.feed(head) and reader.body == b"" and reader.keep_open is keep_open


@pytest.mark.parametrize("data,kind", [
    (b"SMTP ready\r\n\r\n", "malformed"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "malformed"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", "malformed"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}xx\r\n", "malformed"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1), "too_large"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed"),
])
def test_reader_refuses_what_no_router_sends(data, kind):
    with pytest.raises(RequestFailed) as failure:
        ResponseReader().feed(data)
    assert failure.value.kind == kind


def test_reader_keeps_the_config_hash_header():
    value = "37a8eec1ce19687d132fe29051dca629d164e2c4958ba141d5f4133a33f0688f"
    reader, complete = feed_bytewise(b"HTTP/1.1 200 OK\r\nX-Vsr-Config-Hash: %s \r\n"
                                     b"Content-Length: 2\r\n\r\n{}" % value.encode(),
                                     ResponseReader((CONFIG_HASH_HEADER,)))
    assert complete and reader.headers == {"x-vsr-config-hash": value}
    plain = ResponseReader((CONFIG_HASH_HEADER,))
    assert plain.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
    assert plain.headers == {}


HASH_A, HASH_B = "3f0c" * 16, "0123456789abcdef" * 4


def test_reader_eof_before_the_body_is_whole_is_a_reset():
    reader = ResponseReader()
    assert not reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}")
    with pytest.raises(RequestFailed, match="reset"):
        reader.eof()


def test_prompts_larger_than_a_socket_buffer_are_sent_whole(simulator, tmp_path, cli):
    router = simulator(delay_ms=0)
    big = "word " * 800_000  # 4 MB: the send cannot finish in one call
    corpus = write_corpus(tmp_path / "corpus.json", [big, "small", big + "!"])
    out = tmp_path / "run.json"
    assert cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
               "--concurrency", "1,2", "--warmup", "0", "--quiet").code == 0
    for item in json.loads(out.read_text())["passes"]:
        assert item["summary"]["ok"] == 3
        decisions = {r["id"]: r["decision"] for r in item["requests"]}
        expected = simulated_decision(big, ("math", "code", "general", "pii_block"))
        assert decisions[0] == f"{expected}|model-{expected}"


@pytest.mark.parametrize("interim", [
    b"HTTP/1.1 100 Continue\r\n\r\n",
    b"HTTP/1.1 103 Early Hints\r\nLink: </r.css>; rel=preload\r\nX-Vsr-Config-Hash: early\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.js>\r\n\r\n",
])
def test_reader_skips_interim_answers(interim):
    data = interim + final_answer().replace(b"\r\n\r\n", b"\r\nX-Vsr-Config-Hash: abc\r\n\r\n", 1)
    reader, complete = feed_bytewise(data, ResponseReader((b"x-vsr-config-hash",)))
    assert complete and reader.status == 200 and reader.body == OK and reader.keep_open
    assert reader.headers == {"x-vsr-config-hash": "abc"}
    whole = ResponseReader()
    assert whole.feed(data) and whole.status == 200 and whole.body == OK


def test_reader_refuses_switching_protocols():
    with pytest.raises(RequestFailed) as failure:
        ResponseReader().feed(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n")
    assert failure.value.kind == "reset" and failure.value.status == 101


@pytest.mark.parametrize("extra", [b"H", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"])
def test_bytes_beyond_the_answer_close_the_connection(extra):
    reader = ResponseReader()
    assert reader.feed(final_answer() + extra) and reader.body == OK
    assert not reader.keep_open
    chunked = ResponseReader()
    assert chunked.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
                        + extra)
    assert chunked.body == b"{}" and not chunked.keep_open
    later = ResponseReader()
    assert later.feed(final_answer()) and later.keep_open
    assert later.feed(extra) and not later.keep_open


def test_both_framings_are_read_chunked_and_never_reused():
    reader = ResponseReader()
    assert reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n"
                       b"\r\n2\r\n{}\r\n0\r\n\r\n")
    assert reader.body == b"{}" and not reader.keep_open


def test_a_chunk_larger_than_the_limit_is_refused_before_its_bytes():
    reader = ResponseReader()
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    with pytest.raises(RequestFailed) as failure:
        reader.feed(head + b"%x\r\n" % (120 * 1024 * 1024) + b"x" * 1000)
    assert failure.value.kind == "too_large" and failure.value.status == 200
    assert len(reader.body) == 0


@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\n\r\n"])
def test_the_body_limit_holds_for_small_chunks_and_close_delimited_bodies(head):
    chunked = b"chunked" in head
    piece = b"x" * 65536
    piece = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
    reader = ResponseReader()
    reader.feed(head)
    with pytest.raises(RequestFailed) as failure:
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            reader.feed(piece)
    assert failure.value.kind == "too_large"
    assert len(reader.body) <= MAX_BODY_BYTES


def decision_answer(prompt):
    """The final answer naming the prompt as its decision."""
    return final_answer(json.dumps({"decision_result": {"decision_name": prompt}}).encode())


PROMPTS = [f"prompt {i}" for i in range(12)]


@pytest.mark.parametrize("interim", [b"HTTP/1.1 103 Early Hints\r\nLink: </r.css>\r\n\r\n",
                                     b"HTTP/1.1 100 Continue\r\n\r\n"])
def test_every_answer_is_paired_with_its_own_prompt_after_interim_answers(
        scripted, tmp_path, cli, interim):
    server = scripted(lambda prompt, _: [interim, decision_answer(prompt)])
    corpus = write_corpus(tmp_path / "corpus.json", PROMPTS)
    out = tmp_path / "run.json"
    assert cli("run", "--url", server.url, "--corpus", corpus, "--out", out, "--label", "x",
               "--concurrency", "1,4", "--warmup", "2", "--quiet").code == 0
    for item in json.loads(out.read_text())["passes"]:
        assert {r["id"]: r["decision"] for r in item["requests"]} == dict(enumerate(PROMPTS))
        assert {r["status"] for r in item["requests"]} == {200}
    # readiness (/ready, then a preview), warm-up, two passes and the configuration endpoint
    # asked once (the signal deadline): each request reached the server once
    assert server.requests == 2 + 2 + 2 * len(PROMPTS) + 1


def test_a_request_on_an_idle_connection_closed_under_it_is_sent_once_more(
        scripted, tmp_path, cli):
    # each connection answers its first request, then closes when the next one arrives
    # without answering it: the race of a server's idle timeout with a client's send
    server = scripted(lambda prompt, number: None if number else [decision_answer(prompt)])
    corpus = write_corpus(tmp_path / "corpus.json", PROMPTS)
    out = tmp_path / "run.json"
    assert cli("run", "--url", server.url, "--corpus", corpus, "--out", out, "--label", "x",
               "--concurrency", "1", "--warmup", "0", "--quiet").code == 0
    requests = json.loads(out.read_text())["passes"][0]["requests"]
    assert [r["decision"] for r in requests] == PROMPTS
    # the first went out on the connection opened before the pass, which the server had
    # not served yet; every later one first went out on a connection that had answered once
    assert [r.get("retried", False) for r in requests] == [False] + [True] * 11
    assert load_run(str(out)).passes[0].requests[1].retried is True


def test_a_request_is_sent_at_most_twice_and_a_fresh_connection_not_again(scripted):
    server = scripted(lambda prompt, number: None)  # every request: closed unanswered
    target = Target(parse_endpoint(server.url))
    results = PassLoop(target, encode_prompts(target, ["a", "b"]), threading.Event(),
                          PassPlan("x", 1)).run()
    # "a" went out on the connection opened before the pass, then once more on a new one;
    # "b" went out on a connection opened for it, so its close is the answer
    assert [(r.number, r.error, r.retried) for r in results] == [(0, "reset", True),
                                                                (1, "reset", False)]
    assert server.requests == 3


class CountingPoller:
    """A PassLoop's epoll or poll object that notes every event it returns."""

    def __init__(self, poller):
        self.poller = poller
        self.events = []

    def poll(self, *wait):
        events = self.poller.poll(*wait)
        self.events += events
        return events

    def __getattr__(self, name):
        return getattr(self.poller, name)


class ClosingServer(ScriptedServer):
    """Answers one request a connection, then closes it without saying so."""

    def answer_requests(self, connection):
        with connection, connection.makefile("rb") as reader:
            length = 0
            for header in iter(lambda: reader.readline(65537), b"\r\n"):
                if not header:
                    return
                if header.lower().startswith(b"content-length:"):
                    length = int(header.split(b":")[1])
            prompt = json.loads(reader.read(length))["messages"][0]["content"]
            with self.lock:
                self.requests += 1
            connection.sendall(decision_answer(prompt))


def test_idle_connections_the_server_closes_do_not_wake_the_loop():
    # the server closes every connection after answering, without saying so; an open-loop
    # pass at 20 requests per second waits 50 ms between sends, its connections idle (an
    # idle socket left registered at end-of-file raises thousands of events in that time)
    server = ClosingServer(None)
    target = Target(parse_endpoint(server.url))
    payloads = encode_prompts(target, ["a", "b", "c"])
    loop = PassLoop(target, payloads, threading.Event(), PassPlan("x", 4),
                    arrival_schedule(3, 20.0, "constant", 0))
    loop.poller = counting = CountingPoller(loop.poller)
    try:
        results = loop.run()
    finally:
        counting.poller.close()
        server.close()
    assert [r.error for r in results] == [None, None, None] and server.requests == 3
    # the events the sockets raised, not the loop's wake-ups (it also wakes every 0.1 s to see
    # whether the user asked to stop, however long the pass takes on a loaded machine): per
    # request its answer (in one or two reads), and the close of its connection once idle,
    # which closes it here; an idle socket at end-of-file left registered raises an event at
    # every wait: 78,139 in a pass of 100 ms gaps where _idle_event left it open
    assert len(counting.events) <= 3 * len(payloads), counting.events


class EarlyServer(ScriptedServer):
    """Answers each request as soon as its head is read and keeps the connection: then reads
    its body, Content-Length bytes, before the next request (a body the client left unsent
    is made up of the next request's bytes; what is left of them is a bad request: 400, and
    the connection closed, or a body still waited for: a timeout). With `stop_reading`
    it reads nothing more of the connection after its first answer (until `done` is set)."""

    def __init__(self, stop_reading=False):
        super().__init__(None)
        self.stop_reading = stop_reading
        self.done = threading.Event()

    def answer_requests(self, connection):
        with connection, connection.makefile("rb") as reader:
            while line := reader.readline(65537):
                if not line.startswith(b"POST /"):  # as Go's server: 400, and the end
                    connection.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n"
                                       b"Content-Length: 0\r\n\r\n")
                    return
                length = 0
                while (header := reader.readline(65537)) not in (b"\r\n", b""):
                    if header.lower().startswith(b"content-length:"):
                        length = int(header.split(b":")[1])
                with self.lock:
                    self.requests += 1
                connection.sendall(decision_answer("early"))
                if self.stop_reading:
                    self.done.wait(10)
                    return
                while length > 0:
                    data = reader.read(min(length, 2 ** 20))
                    if not data:
                        return
                    length -= len(data)


BIG = 16 * 2 ** 20  # more than the loopback's socket buffers take: the body is still unsent


@pytest.mark.parametrize("schedule", [None, "open"], ids=["closed-loop", "open-loop"])
def test_an_answer_that_comes_before_the_body_is_sent_ends_the_connection(schedule):
    server = EarlyServer()
    target = Target(parse_endpoint(server.url), timeout=5.0)
    payloads = encode_prompts(target, ["x" * BIG, "y" * BIG])
    loop = PassLoop(target, payloads, threading.Event(), PassPlan("x", 1, repeat=2),
                    arrival_schedule(4, 50.0, "constant", 0) if schedule else None)
    try:
        results = loop.run()
    finally:
        server.close()
    # every request answered, each on a connection of its own: none was read as the body of
    # the one before (and timed out)
    assert [(r.error, r.decision) for r in results] == [(None, "early")] * 4, results
    assert server.requests == 4


def test_a_blocking_exchange_takes_an_early_answer_and_closes_the_connection():
    server = EarlyServer(stop_reading=True)
    endpoint = parse_endpoint(server.url)
    connection = Connection(endpoint, 5.0)
    body = b'{"messages": [{"content": "%s"}]}' % (b"x" * BIG)
    request = encode_request(endpoint, "POST", body, ())
    try:
        for _ in range(2):
            reply = connection.exchange(request)  # the server reads no more of the body
            assert reply.status == 200 and b"early" in reply.body
            assert connection.sock is None  # closed: the rest of the body was never sent
    finally:
        connection.close()
        server.done.set()
        server.close()
    assert server.requests == 2


CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("data", [
    CHUNKED + b"%x\r\n%s\r\n0\r\n\r\n" % (len(OK), OK),  # Go's form: one chunk, the last one
    CHUNKED + b"5\r\n" + OK[:5] + b"\r\n%X\r\n" % (len(OK) - 5) + OK[5:] + b"\r\n0\r\n\r\n",
    CHUNKED + b"0\r\n\r\n",  # an empty body
    CHUNKED + b"%010x\r\n%s\r\n0\r\n\r\n" % (len(OK), OK),  # more digits than the fast read
    CHUNKED + b"%x;x=1\r\n%s\r\n0\r\n\r\n" % (len(OK), OK),  # an extension
    CHUNKED + b"%x\r\n%s\r\n0\r\nX-T: 1\r\n\r\n" % (len(OK), OK),  # a trailer
    CHUNKED + b"%x\r\n%s\r\n0\r\n\r\nX" % (len(OK), OK),  # a byte beyond the end
    CHUNKED + b"%X\r\n%s\r\n00\r\n\r\n" % (len(OK), OK),  # the last chunk's size as 00
    CHUNKED + b"11\r\nab\r\n0\r\n\r\ncdefghij\r\n0\r\n\r\n",  # the last chunk's bytes in data
    b"HTTP/1.1 100 Continue\r\n\r\n" + CHUNKED + b"2\r\n{}\r\n0\r\n\r\n",
    CHUNKED.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n") + b"2\r\n{}\r\n0\r\n\r\n",
])
def test_a_chunked_answer_in_one_read_is_read_as_when_fed_byte_by_byte(data):
    whole = ResponseReader(PASS_HEADERS)
    assert whole.feed(data)
    beyond = data.endswith(b"X")
    bytewise, complete = feed_bytewise(data[:-1] if beyond else data,
                                       ResponseReader(PASS_HEADERS))
    assert complete and (not beyond or bytewise.feed(b"X"))
    assert (whole.status, bytes(whole.body), whole.keep_open, whole.headers) == (
        bytewise.status, bytes(bytewise.body), bytewise.keep_open, bytewise.headers)


@pytest.mark.parametrize("data", [
    CHUNKED + b"3\r\n{}\r\n\r\n0\r\n\r\n",  # a chunk shorter than its size
    CHUNKED + b"1\r\n{}\r\n0\r\n\r\n",  # longer
    CHUNKED + b"0x2\r\n{}\r\n0\r\n\r\n",  # int() would take 0x2
    CHUNKED + b"-2\r\n{}\r\n0\r\n\r\n",
    CHUNKED + b"%x\r\n" % (MAX_BODY_BYTES + 1),
])
def test_a_chunked_answer_in_one_read_is_refused_as_when_fed_byte_by_byte(data):
    with pytest.raises(RequestFailed) as bytewise:
        feed_bytewise(data)
    with pytest.raises(RequestFailed) as whole:
        ResponseReader().feed(data)
    assert (whole.value.kind, whole.value.status) == (bytewise.value.kind, bytewise.value.status)
    assert whole.value.kind in ("malformed", "reset", "too_large")


def outcome(feed, data, wanted):
    """What a reader made of an answer fed whole (feed: ResponseReader.feed) or bytewise."""
    try:
        reader = ResponseReader(wanted)
        complete = feed(reader, data)
    except RequestFailed as failure:
        return failure.kind, failure.status
    return complete, reader.status, reader.keep_open, reader.headers, bytes(reader.body)


HEADS = [b"HTTP/1.1 200 OK\r\nDate: %s\r\nContent-Length: 2",
         b"HTTP/1.1 200 OK\r\nServer: x\r\nDate: %s\r\nConnection: close\r\nContent-Length: 2",
         b"HTTP/1.1 503 Service Unavailable\r\nDate: %s\r\nContent-Length: 2",
         b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nDate: %s",  # the last line
         b"HTTP/1.1 200 OK\r\nX-Request-Id: %s\r\nDate: %s\r\nContent-Length: 2",
         b"HTTP/1.1 200 OK\r\nX-Vsr-Config-Hash: %s\r\nContent-Length: 2",
         # folded into Date (kept open), into Connection (closed): the same bytes less Date's
         b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nDate: %s\r\n close\r\nContent-Length: 2",
         b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n close\r\nContent-Length: 2",
         b"HTTP/1.1 200 OK\r\nDate: %s\r\nContent-Length: 3",  # a byte short
         b"HTTP/1.1 200 OK\r\nDate: %s\r\nContent-Length: x",
         b"HTTP/1.1 200 OK\r\nDate: %s\r\nno colon\r\nContent-Length: 2",
         b"HTTP/1.1 100 Continue\r\nDate: %s\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2",
         b"HTTP/1.1 204 No Content\r\nDate: %s"]


@pytest.mark.parametrize("wanted", [PASS_HEADERS, (b"date", b"x-request-id"), ()])
def test_heads_seen_before_are_read_as_when_parsed_anew(wanted):
    """The heads of answers are remembered less their Date and X-Request-Id values: every head
    fed whole, in two orders and with other values, reads as it does fed byte by byte."""
    def bytewise(reader, data):
        done = next((i for i in range(len(data)) if reader.feed(data[i:i + 1])), None)
        if done is not None and done < len(data) - 1:
            reader.feed(data[done + 1:])  # bytes past the end: not kept open
        return done is not None
    for order in (HEADS, HEADS[::-1]):
        for value in (b"Mon, 01 Dec 2026 20:04:41 GMT", b"a", b"", b"x: close", b"Mon\tb"):
            for head in order:
                data = head.replace(b"%s", value) + b"\r\n\r\n{}"
                assert outcome(ResponseReader.feed, data, wanted) == \
                    outcome(bytewise, data, wanted), data


def test_a_cached_small_answer_keeps_each_request_s_own_config_hash(scripted):
    # the same small body, answered with the header, without it (the body's own copy is read),
    # with another header: each request records what its own answer carried, whichever filled
    # the pass loop's cache of classifications first
    in_body, in_header, other = "a" * 64, "b" * 64, "c" * 64
    body = json.dumps({"decision_result": {"decision_name": "math"},
                       "config_hash": in_body}).encode()
    heads = {"h": f"x-vsr-config-hash: {in_header}\r\n", "n": "", "o":
             f"x-vsr-config-hash: {other}\r\n"}
    for order, expected in (("hno", [in_header, in_body, other]),
                            ("nhn", [in_body, in_header, in_body]),
                            ("nnh", [in_body, in_body, in_header])):
        server = scripted(lambda prompt, number, order=order: [
            f"HTTP/1.1 200 OK\r\n{heads[order[number]]}Content-Length: {len(body)}\r\n\r\n"
            .encode() + body])
        target = Target(parse_endpoint(server.url))
        results = PassLoop(target, encode_prompts(target, ["a", "b", "c"]),
                              threading.Event(), PassPlan("x", 1)).run()
        assert [r.config_hash for r in sorted(results, key=lambda r: r.number)] == expected


def test_the_garbage_collector_waits_while_a_pass_runs_and_nothing_it_leaves_is_a_cycle(
        scripted):
    # answers of every kind the loop meets: routed, malformed, bad JSON, closed unanswered,
    # chunked with signal times, an interim 103, a status the parser refuses
    metrics = json.dumps({"domain": {"execution_time_ms": 1.5, "confidence": 0.5}},
                         separators=(",", ":"))
    routed = ('{"original_text":"' + "x" * 600 + '","decision_result":{"decision_name":"m"},'
              f'"metrics":{metrics}}}').encode()
    kinds = [[final_answer(routed)], [final_answer(b"{bad")], None,
             [b"HTTP/1.1 103 Early Hints\r\n\r\n", final_answer(routed)],
             [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
              % (len(routed), routed)], [b"HTTP/1.1 2x0 OK\r\n\r\n"]]
    collecting = []
    server = scripted(lambda prompt, number: collecting.append(gc.isenabled()) or
                      kinds[int(prompt) % len(kinds)])
    target = Target(parse_endpoint(server.url), signals=SignalTable())
    payloads = encode_prompts(target, [str(i) for i in range(120)])
    gc.collect()
    for enabled in (True, False):  # the collector's state is given back as it was
        (gc.enable if enabled else gc.disable)()
        try:
            results = PassLoop(target, payloads, threading.Event(), PassPlan("x", 4)).run()
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
        assert gc.collect() == 0  # what a pass made is freed by reference counts alone
    assert len(collecting) >= 240 and not any(collecting)
    assert {r.error for r in results} >= {None, "bad_json", "malformed", "reset"}


def test_a_scripted_server_once_closed_takes_no_connection_and_leaves_no_thread():
    # the harness itself: a test's server must not answer a later test's requests. A listener
    # closed under a thread blocked in accept() stays listening on Linux, and that thread
    # takes the next connection to its port; a descriptor freed between two calls on it is
    # the next socket's. close() wakes the accept and ends every connection's thread first.
    server = ScriptedServer(lambda prompt, number: [final_answer()])
    port = int(server.url.rsplit(":", 1)[1])
    kept = socket.create_connection(("127.0.0.1", port), timeout=5)  # a client that stays
    body = b'{"messages": [{"content": "a"}]}'
    kept.sendall(b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    assert kept.recv(65536).startswith(b"HTTP/1.1 200")
    server.close()
    with kept:
        assert kept.recv(65536) == b""  # the server's side was closed
    assert len(server.threads) == 2 and not any(t.is_alive() for t in server.threads)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def dripped(data, pause_s, then=None, at=None):
    """Return an answer for ScriptedServer: data a byte at a time, pause_s apart; `then` is
    called once `at` bytes went."""
    def pieces():
        for index in range(len(data)):
            if then is not None and index == at:
                then()
            time.sleep(pause_s)
            yield data[index:index + 1]
    return pieces()


@pytest.mark.parametrize("answer", [final_answer(), final_answer()[:20]])
def test_a_peer_that_drips_its_answer_cannot_outlast_the_deadline(scripted, answer):
    # a byte every 20 ms (50 ms in the report) never let a recv wait out STOP_POLL_S, so the
    # deadline was never looked at: a 0.3 s exchange took the whole dripped answer. 0.2 s:
    # the first byte comes after 20 ms (a stall of the machine's 130 ms leaves it in time),
    # the shorter answer's last after 0.4 s
    router = scripted(lambda prompt, number: dripped(answer, 0.02))
    endpoint = parse_endpoint(router.url)
    connection = Connection(endpoint, 0.2)
    with pytest.raises(RequestFailed) as failure:
        connection.exchange(encode_request(endpoint, "POST", b'{"messages": [{"content": "hi"}]}', ()))
    assert failure.value.kind == "timeout" and not failure.value.unanswered
    assert connection.sock is None


def test_a_peer_that_drips_its_answer_cannot_hold_off_the_stop_flag(scripted):
    stop = threading.Event()
    router = scripted(lambda prompt, number: dripped(final_answer(), 0.02, stop.set, 5))
    endpoint = parse_endpoint(router.url)
    connection = Connection(endpoint, 60.0, stop=stop)
    with pytest.raises(RequestFailed) as failure:
        connection.exchange(encode_request(endpoint, "POST", b'{"messages": [{"content": "hi"}]}', ()))
    assert failure.value.kind == "interrupted"


def test_a_silent_peer_times_out_unanswered(scripted):
    # nothing comes until the client gave up, by construction: the answer waits for the test
    # (a pause of 5 s was waited out whole by the server's thread at the end of the test)
    gave_up = threading.Event()

    def silent_until_given_up():
        gave_up.wait(10)
        yield final_answer()

    router = scripted(lambda prompt, number: silent_until_given_up())
    endpoint = parse_endpoint(router.url)
    try:
        with pytest.raises(RequestFailed) as failure:
            Connection(endpoint, 0.1).exchange(
                encode_request(endpoint, "POST", b'{"messages": [{"content": "hi"}]}', ()))
    finally:
        gave_up.set()
    assert failure.value.kind == "timeout" and failure.value.unanswered
