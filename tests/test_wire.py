"""HTTP wire: the incremental response parser fed whole and byte by byte, what it refuses,
and request bodies larger than a socket buffer sent whole to a loopback simulator."""

import json

import pytest

import router_latency as rl
from conftest import write_corpus

OK = b'{"decision_result": {"decision_name": "ok"}}'


def feed_bytewise(data, reader=None):
    """Feed data one byte at a time; return the reader and whether it completed."""
    reader = reader or rl.ResponseReader()
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
    one_piece = rl.ResponseReader()
    assert one_piece.feed(data) and one_piece.body == OK


def test_reader_body_to_the_close_and_http10():
    reader, complete = feed_bytewise(b"HTTP/1.0 200 OK\r\n\r\n" + OK)
    assert not complete and not reader.keep_open
    assert reader.eof() and reader.body == OK
    alive = rl.ResponseReader()
    assert alive.feed(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}")
    assert alive.keep_open


@pytest.mark.parametrize("head,keep_open", [
    (b"HTTP/1.1 204 No Content\r\n\r\n", True),
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", False),
])
def test_reader_bodyless_and_closing_answers(head, keep_open):
    reader = rl.ResponseReader()
    assert reader.feed(head) and reader.body == b"" and reader.keep_open is keep_open


@pytest.mark.parametrize("data,kind", [
    (b"SMTP ready\r\n\r\n", "reset"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "reset"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (rl.MAX_BODY_BYTES + 1), "too_large"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "reset"),
])
def test_reader_refuses_what_no_router_sends(data, kind):
    with pytest.raises(rl.RequestFailed) as failure:
        rl.ResponseReader().feed(data)
    assert failure.value.kind == kind


def test_reader_keeps_the_config_hash_header():
    value = "37a8eec1ce19687d132fe29051dca629d164e2c4958ba141d5f4133a33f0688f"
    reader, complete = feed_bytewise(b"HTTP/1.1 200 OK\r\nX-Vsr-Config-Hash: %s \r\n"
                                     b"Content-Length: 2\r\n\r\n{}" % value.encode())
    assert complete and reader.config_hash == value
    plain = rl.ResponseReader()
    assert plain.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
    assert plain.config_hash is None


# bodies as the router writes them (pkg/apiserver: writeErrorResponse's envelope; the preview's
# 503 that carries its partial answer with decision_error), and what is not a router's code
@pytest.mark.parametrize("body,code", [
    (b'{"error": {"code": "OVERLOADED", "message": "admission queue is full", '
     b'"timestamp": "2026-11-30T17:00:00Z"}}', "OVERLOADED"),
    (b'{"error":{"code":"INVALID_INPUT","message":"text cannot be empty"}}', "INVALID_INPUT"),
    (b'{"original_text": "x", "metrics": {}, "decision_error": "decision \\"math\\" could '
     b'not be resolved"}', "decision_error"),
    (b'{"original_text": "x", "decision_error": ""}', None),
    (b'{"error": "no such route"}', None),
    (b'{"error": {"code": "two words"}}', None),
    (b'{"error": {"code": 429}}', None),
    (b"404 page not found\n", None),
    (b"[1]", None),
    (b"\xff", None),
])
def test_error_code_of_a_failed_answer(body, code):
    assert rl.error_code(body) == code


def test_reader_eof_before_the_body_is_whole_is_a_reset():
    reader = rl.ResponseReader()
    assert not reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}")
    with pytest.raises(rl.RequestFailed, match="reset"):
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
        expected = rl.simulated_decision(big, ("math", "code", "general", "pii_block"))
        assert decisions[0] == f"{expected}|model-{expected}"
