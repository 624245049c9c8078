"""files.py: atomic writes, writes through the process's own open files, symbolic links and the
locked appends of the history store."""

import json
import math
import os
import subprocess
import threading

import pytest

from router_latency.errors import RouterLatencyError
from router_latency.files import (check_schema, check_writable_target, dump_json, read_json,
                                  write_atomic)

MAX_LINK_HOPS = 40  # files.MAX_LINK_HOPS: Linux's own bound


@pytest.mark.parametrize("name", ["/dev/fd/{fd}", "/proc/self/fd/{fd}", "/proc/{pid}/fd/{fd}",
                                  "link"])
def test_a_write_through_an_open_file_goes_on_where_its_descriptor_stands(tmp_path, name):
    # `rounds --html /dev/stdout > out.txt`: the page was written through a second open at
    # offset 0 of the shell's file, and what was printed after it landed over it
    out = tmp_path / "out.txt"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)  # the shell's `>`: no O_APPEND
    try:
        os.write(fd, b"before\n")
        path = name.format(fd=fd, pid=os.getpid())
        if name == "link":  # a link to the open file, not named as one
            os.symlink(f"/dev/fd/{fd}", tmp_path / "link")
            path = str(tmp_path / "link")
        write_atomic(path, [b"<!doctype html>\n", b"page\n"])
        os.write(fd, b"verdict: PASS\n")
    finally:
        os.close(fd)
    assert out.read_bytes() == b"before\n<!doctype html>\npage\nverdict: PASS\n"
    assert not (tmp_path / "link").exists() or (tmp_path / "link").is_symlink()


def test_a_write_through_a_non_blocking_pipe_waits_for_its_reader_and_loses_nothing():
    # `rounds --html /dev/stdout | reader`, the pipe left non-blocking by another program on
    # it (the flag belongs to the open pipe, which they share): a page larger than the pipe
    # holds waits for the reader to take each part
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    page = b"<p>row</p>\n" * 100_000  # 1.1 MB: 17 times what a pipe holds (64 KiB)
    taken: list = []

    def reader():
        while sum(map(len, taken)) < len(page):
            part = os.read(read_end, 65536)
            if not part:  # the write end closed early
                return
            taken.append(part)
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        write_atomic(f"/dev/fd/{write_end}", [page[:1000], page[1000:]])
    finally:
        os.close(write_end)
        thread.join(30)
        os.close(read_end)
    assert not thread.is_alive() and b"".join(taken) == page


def test_an_open_file_another_process_does_not_have_is_one_line_naming_it():
    # /proc/<pid>/fd/N of another process is opened and appended to; where it has no file N
    # the error says why in words, as every write error does
    other = subprocess.Popen(["sleep", "30"])
    path = f"/proc/{other.pid}/fd/999"
    try:
        with pytest.raises(RouterLatencyError) as raised:
            write_atomic(path, b"page\n")
    finally:
        other.kill()
        other.wait(10)
    assert str(raised.value) == f"cannot write: No such file or directory ({path})"


def test_a_result_document_is_strict_json_or_not_written():
    # NaN and Infinity are no JSON: a reader of the file (jq, a CI step) would refuse it
    for figure in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError):
            dump_json({"p50_ms": figure})
    document = {"p50_ms": 1.5, "label": "gpu \u00e9"}
    assert json.loads(dump_json(document)) == document


def test_an_output_in_a_folder_nobody_may_write_is_refused_before_any_work():
    # /proc/1: no user may make a file there, root included
    with pytest.raises(RouterLatencyError,
                       match=r"^the folder is not writable \(/proc/1/report\.json\)$"):
        check_writable_target("/proc/1/report.json", False)


@pytest.mark.parametrize("schema, message", [
    ("router-latency/run/3", "schema router-latency/run/3 is newer than this tool reads "
                             "(router-latency/run/2); upgrade router-latency (r.json: schema)"),
    # the version this tool reads, spelled otherwise by hand: not a newer one
    ("router-latency/run/02", "schema is 'router-latency/run/02', expected "
                              "'router-latency/run/2' (r.json: schema)"),
    ("router-latency/run/1", "schema is 'router-latency/run/1', expected "
                             "'router-latency/run/2' (r.json: schema)")])
def test_a_schema_not_the_one_read_says_whether_it_is_newer(schema, message):
    with pytest.raises(RouterLatencyError) as raised:
        check_schema({"schema": schema}, "router-latency/run/2", "r.json")
    assert str(raised.value) == message


def test_json_nested_deeper_than_pythons_reader_goes_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RouterLatencyError) as raised:
        read_json(path)
    assert str(raised.value).startswith("invalid JSON: nested deeper than Python's JSON "
                                        "reader goes")
    assert str(raised.value).endswith(f"({path})")


def test_a_loop_of_links_is_refused_in_one_line_and_left_as_it_was(tmp_path):
    # perf.jsonl -> mirror.jsonl -> perf.jsonl: realpath returned a link, and os.replace made
    # perf.jsonl a regular file
    (tmp_path / "perf.jsonl").symlink_to("mirror.jsonl")
    (tmp_path / "mirror.jsonl").symlink_to("perf.jsonl")
    (tmp_path / "self").symlink_to("self")
    for name, shown in (("perf.jsonl", "perf.jsonl -> {d}/mirror.jsonl -> {d}/perf.jsonl"),
                        ("self", "self -> {d}/self")):
        path = str(tmp_path / name)
        with pytest.raises(RouterLatencyError) as raised:
            write_atomic(path, b"x\n")
        assert str(raised.value) == (
            f"a loop of symbolic links ({tmp_path}/{shown.format(d=tmp_path)}); nothing was "
            f"written ({path})")
    assert os.readlink(tmp_path / "perf.jsonl") == "mirror.jsonl"
    assert os.readlink(tmp_path / "mirror.jsonl") == "perf.jsonl"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mirror.jsonl", "perf.jsonl", "self"]


def test_a_chain_of_links_is_followed_to_its_bound_and_refused_beyond(tmp_path):
    target = tmp_path / "file"
    for count in (MAX_LINK_HOPS, MAX_LINK_HOPS + 1):
        previous = "file"
        for index in range(count):
            link = tmp_path / f"l{count}-{index}"
            link.symlink_to(previous)
            previous = link.name
        if count == MAX_LINK_HOPS:
            write_atomic(str(tmp_path / previous), b"end\n")
            assert target.read_bytes() == b"end\n" and (tmp_path / previous).is_symlink()
        else:
            with pytest.raises(RouterLatencyError, match=f"^more than {MAX_LINK_HOPS} symbolic "
                                                         "links in a row"):
                write_atomic(str(tmp_path / previous), b"beyond\n")
            assert target.read_bytes() == b"end\n"
