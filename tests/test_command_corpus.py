"""Tests of command_corpus.py: corpus: its parser and handler."""

import json
from pathlib import Path

import pytest

from conftest import assert_one_line_error, write_corpus


HASH_A, HASH_B = "a" * 64, "b" * 64


def test_run_and_corpus_outputs_never_overwrite_their_inputs(tmp_path, cli):
    corpus = Path(write_corpus(tmp_path / "corpus.json", ["a"]))
    before = corpus.read_bytes()
    run = ("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--label", "x", "--force")
    assert_one_line_error(cli(*run, "--out", tmp_path / "r.json", "--csv", corpus),
                          f"--csv {corpus} is the same file as --corpus", "(--csv)")
    assert_one_line_error(cli(*run, "--out", corpus), "is the same file as --corpus", "(--out)")
    repo = tmp_path / "repo"
    data = repo / "e2e" / "testdata" / "a.json"
    data.parent.mkdir(parents=True)
    data.write_text('{"query": "q"}')
    boundary = tmp_path / "cases.json"
    boundary.write_text('{"cases": [{"name": "n", "text": "t"}]}')
    assert_one_line_error(cli("corpus", "--repo", repo, "--out", data, "--force"),
                          "is the same file as data file", "(--out)")
    assert_one_line_error(cli("corpus", "--repo", repo, "--out", boundary, "--force",
                              "--boundary", boundary), "same file as --boundary", "(--out)")
    assert corpus.read_bytes() == before and data.read_text() == '{"query": "q"}'


@pytest.mark.parametrize("cases", [
    [{"name": "big", "text": "x" * 200, "repeat": 100_000}],
    [{"name": f"c{i}", "text": "y" * 160, "repeat": 100_000} for i in range(20)],
])
def test_a_boundary_case_repeated_beyond_the_corpus_bound_is_refused(tmp_path, cli, cases):
    repo = tmp_path / "repo" / "e2e" / "x" / "testdata"
    repo.mkdir(parents=True)
    (repo / "a.json").write_text('[{"question": "hello there friend"}]')
    boundary = tmp_path / "boundary.json"
    boundary.write_text(json.dumps({"cases": cases}))
    result = cli("corpus", "--repo", tmp_path / "repo", "--out", tmp_path / "c.json",
                 "--boundary", boundary)  # today 20 MB made per case, 1 TB a MemoryError
    assert_one_line_error(result, "the text repeated makes", "boundary.json: cases[")
    assert not (tmp_path / "c.json").exists()


def test_a_repo_that_is_no_folder_is_named_in_the_error(tmp_path, cli):
    missing = tmp_path / "router"
    result = cli("corpus", "--repo", missing, "--out", tmp_path / "corpus.json")
    assert result.code == 2
    assert result.err == f"router-latency: error: not a folder ({missing})\n"
    assert not (tmp_path / "corpus.json").exists()
