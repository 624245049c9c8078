#!/usr/bin/env python3
"""Write every output of fixed run files, for checking that a change moved no byte.

    python3 tools/baseline.py router_latency.py /tmp/before      # on the old build
    python3 tools/baseline.py router_latency.py /tmp/after       # on the new one
    python3 tools/baseline.py package /tmp/after-package         # the package (src/), -m
    python3 tools/baseline.py --compare /tmp/before /tmp/after   # what moved, if anything

The inputs are the real H200 rounds of ../shared/data/h200 (README there) and folders made
from them (a changed decision, an interrupted run, an A/A pair judged under several rules),
copied into a work folder so that every path an output names is the same in both builds.
Each case leaves OUT/<case>.out (stdout), .err (stderr), .code (exit code) and any file the
command wrote, named <case>.<its option>. The cases cover rounds, compare and record in every
format, history (add, and report in every format), every command's --help (at a fixed width)
and the package's entry point. --compare reads two such folders: a JSON output (a .json file,
or the stdout of a case whose name ends in -json) compares as a parsed document, key order
free; everything else byte for byte."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "h200"


def prepare_inputs(data: Path, work: Path) -> None:
    """Copy the real folders into work and make the derived ones."""
    for name in ("cpu-vs-gpu", "aa-gpu"):
        shutil.copytree(data / name, work / name)
    shutil.copy(data / "ladder-gpu.json", work / "ladder-a.json")
    ladder = json.loads((data / "ladder-gpu.json").read_text(encoding="utf-8"))
    ladder["label"] = "other"
    (work / "ladder-b.json").write_text(json.dumps(ladder), encoding="utf-8")
    changed = work / "changed"
    shutil.copytree(data / "cpu-vs-gpu", changed)
    run = json.loads((changed / "r2-gpu.json").read_text(encoding="utf-8"))
    for record in run["passes"]:
        for request in record.get("requests", [])[:3]:
            request["decision"] = "changed|on-purpose"
    (changed / "r2-gpu.json").write_text(json.dumps(run), encoding="utf-8")
    partial = work / "partial"
    shutil.copytree(data / "aa-gpu", partial)
    run = json.loads((partial / "r3-b.json").read_text(encoding="utf-8"))
    run["complete"] = False
    (partial / "r3-b.json").write_text(json.dumps(run), encoding="utf-8")


Case = Tuple[List[str], Dict[str, str]]


def cases() -> Dict[str, Case]:
    """Return {case name: (arguments, {option: extension of the file it writes})}."""
    found: Dict[str, Case] = {}
    folders = {"cvg": ("cpu-vs-gpu", "cpu", "gpu"), "aa": ("aa-gpu", "a", "b"),
               "changed": ("changed", "cpu", "gpu"), "partial": ("partial", "a", "b")}
    for key, (folder, base, new) in folders.items():
        common = ["rounds", "--dir", folder, "--base", base, "--new", new]
        for fmt in ("text", "markdown", "json"):
            found[f"rounds-{key}-{fmt}"] = (common + ["--format", fmt], {})
        found[f"rounds-{key}-files"] = (common + ["--corpus", f"{folder}/corpus.json"],
                                        {"--junit": "xml", "--html": "html"})
    variants = {"unless-worse": ["--pass-unless-worse"],
                "strict": ["--pass-unless-worse", "--strict"],
                "plan": ["--plan"], "per-round": ["--per-round"],
                "sequential": ["--sequential", "10"], "report": ["--decisions", "report"],
                "gate": ["--gate", "p50,p95,p99,mean,req/s,signal:domain:p50"],
                "tolerance0": ["--tolerance", "0"], "incomplete": ["--allow-incomplete"]}
    for key in ("aa", "cvg", "changed", "partial"):
        folder, base, new = folders[key]
        for name, extra in variants.items():
            for fmt in ("text", "markdown", "json"):
                found[f"rounds-{key}-{name}-{fmt}"] = (
                    ["rounds", "--dir", folder, "--base", base, "--new", new, "--format", fmt]
                    + extra, {})
    pairs = {"cvg": ("cpu-vs-gpu/r1-cpu.json", "cpu-vs-gpu/r1-gpu.json"),
             "aa": ("aa-gpu/r1-a.json", "aa-gpu/r1-b.json"),
             "changed": ("changed/r2-cpu.json", "changed/r2-gpu.json"),
             "ladder": ("ladder-a.json", "ladder-b.json")}
    for key, (a, b) in pairs.items():
        for fmt in ("text", "markdown", "json"):
            found[f"compare-{key}-{fmt}"] = (["compare", a, b, "--format", fmt], {})
    found["compare-ladder-cost"] = (["compare", "ladder-a.json", "ladder-b.json",
                                     "--cost-per-hour", "3.5/GPU", "--slo-p95-ms", "30"], {})
    found["compare-changed-fail"] = (["compare", "changed/r2-cpu.json", "changed/r2-gpu.json",
                                      "--fail-on-decision-change"], {})
    found["record"] = (["record", "--section", "cvg=cpu-vs-gpu:cpu:gpu",
                        "--section", "aa=aa-gpu:a:b", "--section", "changed=changed:cpu:gpu"],
                       {"--json": "json", "--markdown": "md"})
    found["record-partial"] = (["record", "--section", "p=partial", "--base", "a",
                                "--new", "b", "--allow-incomplete"],
                               {"--json": "json", "--markdown": "md"})
    found.update(history_cases())
    found.update(help_cases())
    found["bad-rounds"] = (["rounds", "--dir", "nowhere", "--base", "a", "--new", "b"], {})
    found["bad-compare"] = (["compare", "aa-gpu/corpus.json", "aa-gpu/r1-a.json"], {})
    return found


HISTORY = "perf.jsonl"  # the store the history cases build, case after case, in order


def history_cases() -> Dict[str, Case]:
    """Return the history cases: adds that build one store (folders, a run, a label, a bad
    add), then reports of it in every format, gated, from a baseline, of a branch."""
    found: Dict[str, Case] = {}
    store = ["history", "add", "--history", HISTORY, "--branch", "main"]
    found["history-add-aa"] = (store + ["--dir", "aa-gpu", "--base", "a", "--new", "b",
                                        "--commit", "c1", "--date", "2026-01-01"], {})
    found["history-add-cvg"] = (store + ["--dir", "cpu-vs-gpu", "--base", "cpu", "--new",
                                         "gpu", "--commit", "c2", "--base-commit", "c1",
                                         "--label", "v1"], {})
    found["history-add-run"] = (store + ["--run", "aa-gpu/r1-b.json", "--commit", "c3",
                                         "--date", "2026-03-01"], {})
    found["history-add-bad"] = (store + ["--dir", "nowhere", "--base", "a", "--new", "b",
                                         "--commit", "c4"], {})
    report = ["history", "report", "--history", HISTORY]
    for fmt in ("text", "markdown", "json"):
        found[f"history-report-{fmt}"] = (report + ["--format", fmt], {})
        found[f"history-report-gate-{fmt}"] = (report + ["--gate", "--format", fmt,
                                                         "--allow-mismatch", "config"], {})
    found["history-report-files"] = (report + ["--gate"], {"--html": "html"})
    found["history-report-baseline"] = (report + ["--baseline", "v1", "--tolerance", "2"], {})
    found["history-report-branch"] = (report + ["--branch", "other"], {})
    return found


COMMANDS = ("corpus", "run", "compare", "rounds", "record", "history", "simulate", "demo")


def help_cases() -> Dict[str, Case]:
    """Return --help of the tool and of every command, and --version."""
    found: Dict[str, Case] = {"help": (["--help"], {}), "version": (["--version"], {})}
    for command in COMMANDS:
        found[f"help-{command}"] = ([command, "--help"], {})
    return found


def command_of(tool: str) -> List[str]:
    """Return how to start the tool: a file, or the package (src/) as python -m starts it."""
    if tool == "package":
        return [sys.executable, "-m", "router_latency"]
    return [sys.executable, str(Path(tool).resolve())]


def is_json(name: str) -> bool:
    """Return whether an output of a case is a JSON document."""
    return name.endswith(".json") or (name.endswith(".out") and name[:-4].endswith("-json"))


def parsed(path: Path) -> object:
    """Return a file's JSON document, or None where it holds none (an error's empty out)."""
    try:
        return json.loads(path.read_bytes())
    except ValueError:
        return None


def compare_folders(before: Path, after: Path) -> int:
    """Print every output that differs between two baseline folders; return 1 if any."""
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    moved = []
    for name in names:
        old, new = before / name, after / name
        if not old.exists() or not new.exists():
            moved.append(f"{name}: only in {before if old.exists() else after}")
        elif is_json(name) and parsed(old) is not None:
            if parsed(old) != parsed(new):
                moved.append(f"{name}: the JSON documents differ")
        elif old.read_bytes() != new.read_bytes():
            moved.append(f"{name}: differs")
    for line in moved:
        print(line)
    print(f"{len(names)} outputs compared, {len(moved)} differ")
    return 1 if moved else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tool", help="the router_latency.py to run, or 'package' for src/")
    parser.add_argument("out", help="folder to write the outputs to (made; must not exist)")
    parser.add_argument("--data", default=str(DATA), help=f"the H200 data (default {DATA})")
    parser.add_argument("--compare", action="store_true",
                        help="compare two baseline folders (TOOL and OUT) instead")
    args = parser.parse_args()
    if args.compare:
        return compare_folders(Path(args.tool), Path(args.out))
    tool, out = command_of(args.tool), Path(args.out)
    out.mkdir(parents=True)
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("GITHUB_STEP_SUMMARY", "PYTHONPATH")}
    environment.update(COLUMNS="100", LINES="50", PYTHONPATH=str(ROOT / "src"))
    with tempfile.TemporaryDirectory(prefix="baseline-") as folder:
        work = Path(folder)
        prepare_inputs(Path(args.data), work)
        for name, (arguments, files) in cases().items():
            written = [arg for option, ext in files.items()
                       for arg in (option, f"{name}.{option.lstrip('-')}.{ext}")]
            result = subprocess.run([*tool, *arguments, *written],
                                    cwd=work, capture_output=True, env=environment,
                                    timeout=300)
            (out / f"{name}.out").write_bytes(result.stdout)
            (out / f"{name}.err").write_bytes(result.stderr)
            (out / f"{name}.code").write_text(f"{result.returncode}\n")
            for produced in written[1::2]:
                if (work / produced).exists():
                    shutil.move(str(work / produced), str(out / produced))
    print(f"{len(list(out.iterdir()))} files in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
