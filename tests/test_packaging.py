"""Packaging: what `pip install ".[test]"` and `pip install .` give (pyproject.toml), tried
without installing anything: the [test] extra holds every distribution the tests import, the
console script and `python -m router_latency` start the command line, and the round script,
installed beside the router-latency command, runs that command."""

import ast
import importlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys

import pytest

import router_latency
from router_latency.constants import __version__
from conftest import POLL_ENV, ROOT, TOOL_PYC

# what a test imports -> the distribution that provides it; pytest-xdist, mypy,
# check-jsonschema and zizmor are started by name (addopts' -n, `python -m mypy`, the two
# commands test_docs.py runs), not imported
DISTRIBUTIONS = {"pytest": "pytest", "hypothesis": "hypothesis", "junitparser": "junitparser",
                 "html5lib": "html5lib", "cmarkgfm": "cmarkgfm", "ruamel": "ruamel.yaml"}
STARTED = {"pytest-xdist", "mypy", "check-jsonschema", "zizmor"}
# the repository's own: the package, and the files of tests/, tools/ and bench/ the tests import
LOCAL = {"router_latency"} | {path.stem for folder in ("tests", "tools", "bench")
                              for path in (ROOT / folder).glob("*.py")}


def pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def imported_top_names(path):
    """The top-level names of every module a test file imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_test_extra_holds_every_distribution_the_tests_use():
    extra = pyproject()["project"]["optional-dependencies"]["test"]
    named = {re.match(r"[A-Za-z0-9_.-]+", requirement).group(0) for requirement in extra}
    imported = set().union(*map(imported_top_names, sorted((ROOT / "tests").glob("*.py"))))
    foreign = imported - LOCAL - set(sys.stdlib_module_names)
    assert foreign == set(DISTRIBUTIONS), "a test imports a module the extra does not know"
    assert named == {*DISTRIBUTIONS.values(), *STARTED}
    assert "mypy==2.4.1; python_version >= '3.10'" in extra  # the version the tests pin


def test_the_readme_test_command_installs_the_test_extra():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Set-up: two commands", 1)[1].split("```sh\n", 1)[1]
    tests = block.split("```", 1)[0].strip().splitlines()[1]
    assert ' .venv/bin/pip install -q ".[test]" && .venv/bin/python -m pytest -q' in tests
    # a worker per core; one that runs out of tests takes from another's (conftest.py deals
    # the long ones out first); anyio's plugin, which no test uses, not loaded
    assert pyproject()["tool"]["pytest"]["ini_options"]["addopts"] == [
        "-n", "auto", "--dist", "worksteal", "-p", "no:anyio"]


def test_the_console_script_is_the_command_line(capsys):
    scripts = pyproject()["project"]["scripts"]
    module, _, function = scripts["router-latency"].split()[0].partition(":")
    assert (module, function) == ("router_latency.__main__", "run")
    entry = getattr(importlib.import_module(module), function)
    # console_main sets SIGINT aside before it exits: this worker's later tests, and the
    # processes they start, must still get Ctrl-C (a test sends SIGINT to a child, which
    # inherits an ignored SIGINT)
    sys_argv, handler = sys.argv, signal.getsignal(signal.SIGINT)
    sys.argv = ["router-latency", "--version"]
    try:
        with pytest.raises(SystemExit) as exited:
            entry()
    finally:
        sys.argv = sys_argv
        signal.signal(signal.SIGINT, handler)
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"router-latency {__version__}\n"


def test_the_package_face_loads_each_module_when_a_name_is_asked_for(tmp_path):
    # importing the package runs its constants only, so the entry's handler comes first
    code = ("import sys; import router_latency as rl; "
            "print(sorted(m for m in sys.modules if m.startswith('router_latency.'))); "
            "rl.judge_rounds; print('router_latency.rounds' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=60,
                            cwd=tmp_path)  # not beside the one file
    assert result.stdout == "['router_latency.constants']\nTrue\n", result.stderr
    for name in router_latency.__all__:
        assert getattr(router_latency, name) is getattr(
            importlib.import_module(f"router_latency.{router_latency._HOMES[name]}"), name)
    with pytest.raises(AttributeError, match="has no attribute 'judge'"):
        router_latency.judge  # noqa: B018


def test_python_m_router_latency_runs_the_package(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run([sys.executable, "-m", "router_latency", "--version"], env=env,
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (
        0, f"router-latency {__version__}\n", "")


def installed_bin(tmp_path, with_command=True):
    """A bin/ folder as `pip install .` leaves it: run_rounds.sh (pyproject's script-files)
    and, unless told not, a router-latency command, here one that logs its arguments and runs
    the tool; no router_latency.py in the folder above."""
    scripts = pyproject()["tool"]["setuptools"]["script-files"]
    assert scripts == ["rounds/run_rounds.sh"]
    folder = tmp_path / "venv" / "bin"
    folder.mkdir(parents=True)
    shutil.copy2(ROOT / scripts[0], folder / "run_rounds.sh")  # keeps its executable bit
    if with_command:
        command = folder / "router-latency"
        command.write_text(f"#!/bin/sh\necho \"$@\" >> {shlex.quote(str(tmp_path / 'log'))}\n"
                           f"exec {shlex.quote(sys.executable)} {shlex.quote(str(TOOL_PYC))} "
                           f'"$@"\n')
        command.chmod(0o755)
    return folder


def round_script(folder, tmp_path, *extra):
    """Start the bin/ folder's run_rounds.sh as a user would, with a corpus that is missing."""
    return subprocess.run(
        [str(folder / "run_rounds.sh"), "--rounds", "3", "--dir", str(tmp_path / "results"),
         "--corpus", str(tmp_path / "missing.json"),
         "--base", "cpu", "--base-start", "true", "--base-url", "http://127.0.0.1:9",
         "--new", "gpu", "--new-start", "true", "--new-url", "http://127.0.0.1:9", *extra],
        capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **POLL_ENV})


@pytest.mark.process
def test_the_installed_round_script_runs_the_command_beside_it(tmp_path):
    folder = installed_bin(tmp_path)
    planned = round_script(folder, tmp_path, "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert f"\nthen: {folder}/router-latency rounds --dir " in planned.stdout
    # its checks run the command (--version) before they find the corpus missing
    checked = round_script(folder, tmp_path)
    assert checked.stderr == (f"run_rounds.sh: error: cannot read the corpus file "
                              f"({tmp_path}/missing.json)\n")
    assert checked.returncode == 2
    assert (tmp_path / "log").read_text() == "--version\n"


@pytest.mark.process
def test_the_round_script_without_a_tool_says_it_cannot_run_one(tmp_path):
    # copied alone: no router_latency.py in the folder above, no router-latency beside it
    folder = installed_bin(tmp_path, with_command=False)
    result = round_script(folder, tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"run_rounds.sh: error: cannot run the tool: python3 "
                                    f"{folder}/../router_latency.py --version said: "), \
        result.stderr
