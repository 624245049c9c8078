"""Tests of command_demo.py: demo: the whole method on two simulated routers, its parser and
handler."""

import pytest

from conftest import assert_one_line_error


HASH_A, HASH_B = "a" * 64, "b" * 64


@pytest.mark.parametrize("where", ["file", "below a file"])
def test_demo_into_a_path_that_cannot_be_a_folder_is_one_line(tmp_path, cli, where):
    (tmp_path / "taken").write_text("x")
    keep = tmp_path / "taken" if where == "file" else tmp_path / "taken" / "sub"
    assert_one_line_error(cli("demo", "--rounds", "3", "--keep", keep), "cannot make the folder")
