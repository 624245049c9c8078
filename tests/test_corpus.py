"""corpus: extraction from nested E2E data (with a property test of it), order, boundary
cases, stable bytes, the git commit, links and size limits."""

import hashlib
import json
import os
import shutil

import pytest
from hypothesis import given, strategies as st

from router_latency.corpus import (BoundaryCase, boundary_cases, build_corpus, corpus_bytes, CORPUS_SCHEMA,
                                   git_commit,
                                   DEFAULT_BOUNDARY_CASES, default_boundary_cases, extract_prompts,
                                   load_boundary_cases, load_corpus)
from router_latency.errors import RouterLatencyError
from conftest import ROOT, SETTINGS, write

# its files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


def test_extract_prompts_walks_every_key_in_document_order():
    document = {"a": [{"query": "q1", "x": {"question": "q2"}}],
                "similar_questions": ["s1", {"prompt": "p1"}, "s2"],
                "messages": [{"role": "user", "content": "m1"}], "description": "no"}
    assert list(extract_prompts(document)) == ["q1", "q2", "s1", "s2", "p1", "m1"]


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
    assert list(extract_prompts(json.loads(json.dumps(document)))) == placed


def test_corpus_distinct_prompts_in_sorted_path_order(repo, tmp_path, cli):
    out = tmp_path / "corpus.json"
    result = cli("corpus", "--repo", repo, "--out", out, "--no-boundary")
    assert result.code == 0 and result.err == ""
    corpus = json.loads(out.read_text())
    assert corpus["schema"] == "router-latency/corpus/1"
    assert [(p["text"], p["source"]) for p in corpus["prompts"]] == [
        ("What is 2+2?", "e2e/testcases/testdata/a_cases.json"),
        ("plain user text", "e2e/testcases/testdata/a_cases.json"),
        ("part one", "e2e/testcases/testdata/a_cases.json"),
        ("part two", "e2e/testcases/testdata/a_cases.json"),
        ("Explain DNS", "e2e/testcases/testdata/b_cases.json"),
        ("nested prompt", "e2e/testcases/testdata/b_cases.json"),
        ("What is X?", "e2e/testcases/testdata/b_cases.json"),
        ("Define X", "e2e/testcases/testdata/b_cases.json"),
        ("deep file", "e2e/testcases/testdata/sub/c_cases.json"),
    ]
    assert [p["id"] for p in corpus["prompts"]] == list(range(9))
    assert corpus["files"] == {"e2e/testcases/testdata/a_cases.json": 4,
                               "e2e/testcases/testdata/b_cases.json": 6,
                               "e2e/testcases/testdata/sub/c_cases.json": 1}
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert result.out.splitlines()[-1] == f"{digest}  {out}"
    assert result.out.splitlines()[0] == \
        "corpus: 9 prompts (9 distinct from 3 files, 0 boundary cases)"


def test_corpus_key_and_glob_options(repo, tmp_path, cli):
    out = tmp_path / "corpus.json"
    assert cli("corpus", "--repo", repo, "--out", out, "--no-boundary", "--key", "custom",
               "--glob", "e2e/testcases/testdata/a_*.json").code == 0
    texts = [p["text"] for p in json.loads(out.read_text())["prompts"]]
    assert texts == ["What is 2+2?", "plain user text", "part one", "part two",
                     "custom key text"]


def test_corpus_appends_boundary_cases_once(repo, tmp_path, cli):
    boundary = tmp_path / "boundary.json"
    boundary.write_text(json.dumps({"cases": [
        {"name": "dup", "text": "Explain DNS"}, {"name": "long", "text": "word ", "repeat": 3},
        {"name": "ctrl", "text": "a\u0000b\u0007"}]}))
    out = tmp_path / "corpus.json"
    assert cli("corpus", "--repo", repo, "--out", out, "--boundary", boundary).code == 0
    prompts = json.loads(out.read_text())["prompts"]
    assert [(p["text"], p["source"]) for p in prompts[-2:]] == [
        ("word word word ", "boundary:long"), ("a\u0000b\u0007", "boundary:ctrl")]
    assert sum(p["text"] == "Explain DNS" for p in prompts) == 1


def test_built_in_boundary_cases_agree_with_the_editable_file():
    # the module carries the cases so that it works alone; the file is where people edit them
    document = json.loads((ROOT / "corpus" / "boundary_cases.json").read_text("utf-8"))
    assert list(DEFAULT_BOUNDARY_CASES) == document["cases"], (
        "corpus/boundary_cases.json and router_latency.DEFAULT_BOUNDARY_CASES differ: "
        "copy the change into the other")
    assert default_boundary_cases() == load_boundary_cases(
        ROOT / "corpus" / "boundary_cases.json")


def test_boundary_cases_repeat_their_text_and_read_their_expectation(tmp_path):
    boundary = tmp_path / "boundary.json"
    boundary.write_text(json.dumps({"cases": [
        {"name": "long", "text": "ab", "repeat": 2, "expect": "http_4xx"}]}))
    assert load_boundary_cases(boundary) == [BoundaryCase("long", "abab", ("http_4xx",))]


def test_shipped_boundary_cases_cover_the_listed_kinds():
    cases = {case.name: case.text for case in default_boundary_cases()}
    assert len(cases["one_character"]) == 1
    assert cases["whitespace_only"].strip() == ""
    assert 7500 <= len(cases["long_8000_words"].split()) <= 8500
    assert any(ord(c) < 32 and c not in "\n\t" for c in cases["control_characters"])
    assert cases["many_lines"].count("\n") >= 100
    for name in ("cjk", "emoji", "right_to_left", "code", "json_inside", "pii_like",
                 "jailbreak_like"):
        assert cases[name].strip(), name


def test_corpus_bytes_are_identical_across_runs_and_locations(repo, tmp_path, cli,
                                                             monkeypatch):
    # The same data in a second folder, built with --repo typed in several ways: relative,
    # absolute, with a trailing slash and a detour. The bytes depend on the data alone.
    elsewhere = tmp_path / "elsewhere" / "repo"
    shutil.copytree(repo, elsewhere, symlinks=True)
    monkeypatch.chdir(repo.parent)
    typed = ["repo", str(repo), "repo/", "./repo/../repo", str(elsewhere),
             os.path.relpath(elsewhere)]
    outs = [tmp_path / f"c{i}.json" for i in range(len(typed))]
    printed = []
    for path, out in zip(typed, outs):
        result = cli("corpus", "--repo", path, "--out", out)
        assert result.code == 0 and result.err == ""
        assert f"repo: {path}" in result.out  # shown as typed, not stored
        printed.append(result.out.splitlines()[-1].split()[0])
    contents = {out.read_bytes() for out in outs}
    assert len(contents) == 1
    data = contents.pop()
    assert printed == [hashlib.sha256(data).hexdigest()] * len(typed)
    assert str(tmp_path).encode() not in data and b'"repo"' not in data
    built = [corpus_bytes(build_corpus(folder, boundary=default_boundary_cases()))
             for folder in (repo, elsewhere)]
    assert built[0] == built[1] == data


def test_corpus_does_not_follow_links_out_of_the_repo(repo, tmp_path, cli):
    outside = tmp_path / "outside"
    write(outside / "secret.json", [{"query": "outside text"}])
    data = repo / "e2e" / "testcases" / "testdata"
    (data / "linked_dir").symlink_to(outside, target_is_directory=True)
    (data / "linked.json").symlink_to(outside / "secret.json")
    out = tmp_path / "corpus.json"
    result = cli("corpus", "--repo", repo, "--out", out, "--no-boundary")
    assert result.code == 0
    assert "outside text" not in out.read_text()
    assert "skipped e2e/testcases/testdata/linked.json: a link that leaves the repo" in result.err


def test_corpus_skips_files_over_the_size_limit(repo, tmp_path, cli, monkeypatch):
    monkeypatch.setattr("router_latency.corpus.MAX_CORPUS_FILE_BYTES", 100)
    big = repo / "e2e" / "testcases" / "testdata" / "big.json"
    write(big, [{"query": "x" * 200}])
    out = tmp_path / "corpus.json"
    result = cli("corpus", "--repo", repo, "--out", out, "--no-boundary")
    assert result.code == 0
    assert "skipped e2e/testcases/testdata/big.json: larger than" in result.err
    assert "x" * 200 not in out.read_text()


def test_boundary_expectations_go_into_the_corpus(repo, tmp_path, cli):
    boundary = tmp_path / "boundary.json"
    boundary.write_text(json.dumps({"cases": [
        {"name": "blank", "text": "  ", "expect": ["http_4xx", "routed"]},
        {"name": "refused", "text": "refuse me", "expect": "http_4xx"},
        {"name": "plain", "text": "route me"}]}))
    out = tmp_path / "corpus.json"
    assert cli("corpus", "--repo", repo, "--out", out, "--boundary", boundary).code == 0
    prompts = json.loads(out.read_text())["prompts"]
    # written in the order of EXPECT_OUTCOMES, one outcome as a string; none: no key at all
    assert [p.get("expect") for p in prompts[-3:]] == [["routed", "http_4xx"], "http_4xx", None]
    assert all("expect" not in p for p in prompts[:-3])
    loaded = load_corpus(str(out)).prompts
    assert [p.expect for p in loaded[-3:]] == [("routed", "http_4xx"), ("http_4xx",), ()]


def test_shipped_whitespace_case_accepts_routing_and_rejection():
    # the router's preview routes whitespace-only text (pkg/services/errors.go: "Whitespace-only
    # raw text remains valid"); older routers and `simulate` answer 400 INVALID_INPUT
    cases = {case.name: case for case in default_boundary_cases()}
    assert cases["whitespace_only"].expect == ("routed", "http_4xx")
    assert [name for name, case in cases.items() if case.expect] == ["whitespace_only"]


@pytest.mark.parametrize("expect", ["http_5xx", [], ["routed", "routed"], 4, ["timeout"]])
def test_bad_expectations_are_refused(repo, tmp_path, cli, expect):
    boundary = tmp_path / "boundary.json"
    boundary.write_text(json.dumps({"cases": [{"name": "x", "text": "x", "expect": expect}]}))
    out = tmp_path / "corpus.json"
    result = cli("corpus", "--repo", repo, "--out", out, "--boundary", boundary)
    assert result.code == 2 and not out.exists()
    assert result.err == (f"router-latency: error: 'expect' must be one of routed, http_4xx or "
                          f"a list of them, each once ({boundary}: cases[0].expect)\n")
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps({"schema": CORPUS_SCHEMA,
                                  "prompts": [{"id": 0, "text": "x", "expect": expect}]}))
    refused = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                  tmp_path / "o.json", "--label", "x")
    assert refused.code == 2 and f"({corpus}: prompts[0].expect)" in refused.err


@pytest.mark.parametrize("document, options", [
    (["What is DNS?", "Explain TLS"], []),  # plain strings: no key holds them
    ({"cases": [{"text": "What is DNS?"}]}, ["--key", "txt"]),  # a wrong --key
    ({"cases": [{"query": ""}, {"query": ""}]}, []),  # only empty prompts
    ({}, []),
])
def test_a_data_file_without_prompts_is_refused(tmp_path, cli, document, options):
    # "12 prompts (0 distinct from 1 files, 12 boundary cases)" and exit 0 before: the team
    # would have gated on the boundary cases alone
    data = tmp_path / "repo" / "e2e" / "x" / "testdata" / "cases.json"
    write(data, document)
    write(data.parent / "good.json", [{"query": "a prompt"}])
    out = tmp_path / "corpus.json"
    result = cli("corpus", "--repo", tmp_path / "repo", "--out", out, *options)
    assert result.code == 2 and not out.exists()
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert result.err.startswith("router-latency: error: no prompts: no non-empty string under "
                                 "the keys tried (query, question, prompt, original_question")
    assert f"({data})\n" in result.err and "--data-format list" in result.err
    if options:
        assert "original_question, txt, similar_questions" in result.err


def test_corpus_reads_a_list_of_prompts_jsonl_and_lines(tmp_path, cli):
    repo = tmp_path / "repo"
    write(repo / "list.json", ["What is DNS?", "", "Explain TLS", "What is DNS?"])
    (repo / "p.jsonl").write_text('"one"\n\n{"query": "two", "x": {"prompt": "three"}}\n'
                                  '["four"]\n{"messages": [{"role": "user", "content": "five"}]}\n')
    (repo / "p.txt").write_text("first line\n  indented \n\nthird\n", encoding="utf-8")
    texts = {}
    for form, glob in (("list", "list.json"), ("jsonl", "p.jsonl"), ("lines", "p.txt")):
        out = tmp_path / f"{form}.json"
        result = cli("corpus", "--repo", repo, "--out", out, "--glob", glob, "--data-format", form,
                     "--no-boundary")
        assert result.code == 0, result.err
        corpus = json.loads(out.read_text())
        assert corpus["source"]["format"] == form
        texts[form] = [p.text for p in load_corpus(str(out)).prompts]
    assert texts == {"list": ["What is DNS?", "Explain TLS"],
                     # a string line is a prompt; an object or list is read with the keys
                     "jsonl": ["one", "two", "three", "five"],
                     "lines": ["first line", "  indented ", "third"]}
    # the default format keeps its bytes: no "format" member
    out = tmp_path / "json.json"
    write(repo / "e2e" / "t" / "testdata" / "a.json", [{"query": "q"}])
    assert cli("corpus", "--repo", repo, "--out", out, "--no-boundary").code == 0
    assert "format" not in json.loads(out.read_text())["source"]


@pytest.mark.parametrize("form, content, message", [
    ("list", '[{"query": "x"}]', "expected a JSON list of prompt strings (--data-format list)"),
    ("list", '{"prompts": ["x"]}', "expected a JSON list of prompt strings (--data-format list)"),
    ("list", '[]', "no prompts: the list holds no non-empty string"),
    ("jsonl", '"a"\n{"query": \n', "invalid JSON at line 1"),
    ("json", "hello there\nwhat is 2+2\n", "invalid JSON at line 1 column 1: Expecting value; "
     "--data-format lines reads one prompt a line, --data-format jsonl one JSON value a line"),
    ("lines", "\n\n", "the file is empty"),
    ("lines", b"\xff\n", "not UTF-8 (byte 0)"),
])
def test_corpus_formats_refuse_files_not_of_their_shape(tmp_path, cli, form, content, message):
    data = tmp_path / "repo" / "data.in"
    data.parent.mkdir()
    data.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "corpus.json"
    result = cli("corpus", "--repo", tmp_path / "repo", "--out", out, "--glob", "data.in",
                 "--data-format", form)
    assert result.code == 2 and not out.exists(), result
    assert message in result.err and str(data) in result.err and result.err.count("\n") == 1
    if form == "jsonl" and "invalid" in message:
        assert f"({data}: line 2)" in result.err


def test_reading_a_corpus_of_tiny_prompts_takes_under_4_times_its_size(tmp_path, monkeypatch):
    # a million prompts of a few characters took 8.5 times the file (dicts of id, text and
    # source, the file's bytes and text side by side); counted by tracemalloc from the bytes
    # read on, which is exact and the same on any machine, not a timing or the RSS. 5,000
    # prompts: 3.66 times, a share no smaller than 20,000's (3.63), what is fixed weighing more.
    # A corpus read first, untraced, imports what reading imports on its first use (hashlib:
    # about 113 KiB, 0.4 times this file), so the peak is the reading's alone, whatever this
    # worker ran before
    import tracemalloc
    import router_latency.corpus as corpus_module
    path = tmp_path / "tiny.json"
    path.write_bytes(corpus_bytes({"schema": CORPUS_SCHEMA, "source": {}, "files": {}, "prompts": [
        {"id": 0, "text": "p0", "source": "b"}]}))
    assert len(load_corpus(str(path)).prompts) == 1
    path.write_bytes(corpus_bytes({"schema": CORPUS_SCHEMA, "source": {}, "files": {}, "prompts": [
        {"id": i, "text": f"p{i}", "source": "b"} for i in range(5000)]}))
    real = corpus_module.read_bytes

    def read(*args):
        data = bytes(real(*args))  # the bytes themselves, not read's larger buffer
        tracemalloc.reset_peak()
        return data

    monkeypatch.setattr(corpus_module, "read_bytes", read)
    tracemalloc.start()
    try:
        corpus = load_corpus(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert corpus.prompts[4999].text == "p4999" and corpus.prompts[4999].id == 4999
    assert peak < 4 * path.stat().st_size, peak / path.stat().st_size


def test_prompts_of_other_shapes_are_still_refused_by_their_field(tmp_path):
    # prompts are made as the file is parsed; one not of a prompt's shape is still read as
    # an object and refused by the field that is wrong
    for prompt, message in (({"text": "x"}, "'id' must be 0"), ({"id": 0}, "a string 'text'"),
                            ({"id": 0, "text": "x", "extra": 1, "source": "s"}, None),
                            ({"text": "x", "id": 0}, None),
                            ({"id": 0, "text": "x", "expect": None}, "'expect' must be"),
                            ({"id": True, "text": "x"}, "'id' must be 0")):
        path = tmp_path / "c.json"
        path.write_text(json.dumps({"schema": CORPUS_SCHEMA, "prompts": [prompt]}))
        if message is None:
            assert [p.text for p in load_corpus(str(path)).prompts] == ["x"]
        else:
            with pytest.raises(Exception) as caught:
                load_corpus(str(path))
            assert message in str(caught.value)


def test_the_commit_is_read_from_git_as_git_would_resolve_head(tmp_path):
    # no git run: HEAD naming a branch (a loose ref, else packed-refs), a detached HEAD, and
    # a worktree's .git file pointing at its folder, which shares its refs through commondir
    sha, other = "1" * 40, "2" * 40
    repo = tmp_path / "repo"
    git = repo / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text(sha + "\n")
    assert git_commit(repo) == sha
    (git / "refs" / "heads" / "main").unlink()
    (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{other} refs/heads/dev\n"
                                     f"{sha} refs/heads/main\n")
    assert git_commit(repo) == sha
    (git / "HEAD").write_text(other + "\n")
    assert git_commit(repo) == other
    worktree = tmp_path / "wt"
    worktree.mkdir()
    folder = git / "worktrees" / "wt"
    folder.mkdir(parents=True)
    (worktree / ".git").write_text(f"gitdir: {folder}\n")
    (folder / "commondir").write_text("../..\n")
    (folder / "HEAD").write_text("ref: refs/heads/main\n")
    assert git_commit(worktree) == sha
    (folder / "HEAD").write_text("ref: refs/heads/gone\n")
    assert git_commit(worktree) is None
    assert git_commit(tmp_path / "none") is None


@pytest.mark.parametrize("repeat", [0, 100001, 2.5, "3", True])
def test_a_boundary_case_repeated_out_of_range_is_refused_naming_it(repeat):
    cases = [{"name": "ok", "text": "x"}, {"name": "long", "text": "y", "repeat": repeat}]
    with pytest.raises(RouterLatencyError) as refused:
        boundary_cases(cases, "cases.json")
    assert str(refused.value) == ("'repeat' must be a whole number from 1 to 100000 "
                                  "(cases.json: cases[1])")
