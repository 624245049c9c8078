#!/usr/bin/env python3
"""Write every output of fixed run files, for checking that a change moved no byte.

    python3 tools/baseline.py router_latency.py /tmp/before      # on the old build
    python3 tools/baseline.py router_latency.py /tmp/after       # on the new one
    diff -r /tmp/before /tmp/after

The inputs are the real H200 rounds of ../shared/data/h200 (README there) and folders made
from them (a changed decision, an interrupted run, an A/A pair judged under several rules),
copied into a work folder so that every path an output names is the same in both builds.
Each case leaves OUT/<case>.out (stdout), .err (stderr), .code (exit code) and any file the
command wrote, named <case>.<its option>."""

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
    found["bad-rounds"] = (["rounds", "--dir", "nowhere", "--base", "a", "--new", "b"], {})
    found["bad-compare"] = (["compare", "aa-gpu/corpus.json", "aa-gpu/r1-a.json"], {})
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tool", help="the router_latency.py to run")
    parser.add_argument("out", help="folder to write the outputs to (made; must not exist)")
    parser.add_argument("--data", default=str(DATA), help=f"the H200 data (default {DATA})")
    args = parser.parse_args()
    tool, out = Path(args.tool).resolve(), Path(args.out)
    out.mkdir(parents=True)
    environment = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    with tempfile.TemporaryDirectory(prefix="baseline-") as folder:
        work = Path(folder)
        prepare_inputs(Path(args.data), work)
        for name, (arguments, files) in cases().items():
            written = [arg for option, ext in files.items()
                       for arg in (option, f"{name}.{option.lstrip('-')}.{ext}")]
            result = subprocess.run([sys.executable, str(tool), *arguments, *written],
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
