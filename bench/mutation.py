"""Mutation bench: would the suite notice a wrong verdict? A seeded sample of mutmut's mutants
of the modules that decide what a user sees, each run against the in-process tests that
reach its module; prints and writes the score and the surviving mutants.

    pip install -e '.[mutation]'
    nice -n 19 python bench/mutation.py --sample 300 --seed 45 --jobs 1 --out mutation.json

The mutants are mutmut's own (its generator, mutmut.mutation.file_mutation.create_mutations:
operators, constants, comparisons, names, arguments, strings), those inside functions, as
mutmut runs them; the runner is this script's, not mutmut's: mutmut's runs the whole suite
first to map tests to functions (its stats), and then every mutant of the package, hours on
two cores, where a sample of a few hundred needs only the tests of its module. Each sampled
mutant is written alone into the module of a scratch copy of src/ and tests/ (never the work
tree), and the module's tests (MODULE_TESTS: its own file first, then those that import it
or reach it through the command line) run in-process with -x, the process tests (marked
`process`: they run the generated file) and test_structure.py (the generated file, mypy)
excluded. A mutant is killed when a test fails (or the tests time out, or cannot import
the module), survives when they all pass. The sample is stratified by module: each
module's share of the sample is its share of the mutants, at least MIN_PER_MODULE.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "src/router_latency"
# the modules that decide what a user sees, and the test files that reach each (its own
# first, so that -x stops a killed mutant early)
MODULE_TESTS = {
    "gate": ["test_gate", "test_rounds", "test_command_rounds", "test_history", "test_noise",
             "test_record", "test_sequential"],
    "stats": ["test_stats", "test_gate", "test_sequential", "test_noise", "test_rounds",
              "test_slower", "test_history", "test_command_rounds"],
    "noise": ["test_noise", "test_rounds", "test_command_rounds"],
    "history": ["test_history", "test_history_render", "test_command_history"],
    "degraded": ["test_degraded", "test_rounds", "test_command_rounds", "test_command_run"],
    "meaning": ["test_meaning", "test_degraded", "test_client", "test_versions",
                "test_attribution", "test_command_run"],
    "files": ["test_files", "test_measuring", "test_runfile", "test_formats", "test_command_record",
              "test_command_compare", "test_corpus", "test_history", "test_command_rounds"],
    "runfile": ["test_runfile", "test_rounds", "test_degraded", "test_gate", "test_noise",
                "test_command_run", "test_command_rounds"],
    "telemetry": ["test_telemetry", "test_gpu", "test_captures"],
    "corpus": ["test_corpus", "test_command_corpus", "test_cli", "test_command_run"],
}
MIN_PER_MODULE = 5


def mutants_of(module: str) -> list:
    """Return the module's mutants inside functions, as mutmut makes them: each a dict of its
    module, its number among them and mutmut's mutation (rendered only once drawn)."""
    import libcst
    from mutmut.mutation.file_mutation import create_mutations
    path = ROOT / PACKAGE / f"{module}.py"
    tree, mutations, _, _ = create_mutations(str(path), path.read_text())
    inside = [m for m in mutations
              if isinstance(m.contained_by_top_level_function, libcst.FunctionDef)]
    return [{"module": module, "number": n, "tree": tree, "mutation": m}
            for n, m in enumerate(inside)]  # mutmut mutates functions only (its trampolines)


def rendered(mutant: dict) -> dict:
    """Return a drawn mutant with its module's mutated source, line, function and diff."""
    from mutmut.mutation.file_mutation import deep_replace
    tree, mutation = mutant["tree"], mutant["mutation"]
    code = tree.code
    mutated = deep_replace(tree, mutation.original_node, mutation.mutated_node).code
    diff = list(difflib.unified_diff(code.splitlines(), mutated.splitlines(), lineterm="",
                                     n=0))[2:]
    return {"module": mutant["module"], "number": mutant["number"], "code": mutated,
            "line": int(diff[0].split()[1].lstrip("-").split(",")[0]) if diff else 0,
            "function": mutation.contained_by_top_level_function.name.value,
            "diff": "\n".join(diff[1:])}


def stratified(by_module: dict, size: int, seed: int) -> list:
    """Return a seeded sample of about `size` mutants: each module's share of the sample is
    its share of the mutants (largest remainders), at least MIN_PER_MODULE."""
    rng = random.Random(seed)
    total = sum(len(m) for m in by_module.values())
    quotas = {name: size * len(m) / total for name, m in by_module.items()}
    counts = {name: max(MIN_PER_MODULE, int(q)) for name, q in quotas.items()}
    for name in sorted(quotas, key=lambda n: quotas[n] - int(quotas[n]), reverse=True):
        if sum(counts.values()) >= size:
            break
        counts[name] += 1
    sample = []
    for name in sorted(by_module):
        sample += rng.sample(by_module[name], min(counts[name], len(by_module[name])))
    rng.shuffle(sample)
    return sample


def scratch_copy() -> Path:
    """Return a scratch root holding the work tree's files (what tests read beside the
    package: the generated file, docs, rounds/), without .git."""
    folder = Path(tempfile.mkdtemp(prefix="mutation-")) / "tree"
    shutil.copytree(ROOT, folder, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.pyc", ".hypothesis", ".pytest_cache", "mutants"))
    return folder


def run_tests(root: Path, module: str, timeout: float, tests=None) -> tuple:
    """Return (outcome, seconds, last line, the failed test) of the module's tests (or the
    given test ids) in a scratch root."""
    files = tests or [f"tests/{name}.py" for name in MODULE_TESTS[module]]
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-rf", "-n", "0", "-p",
               "no:cacheprovider", "-m", "not process", "-o", "addopts=", *files]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=root, capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - started, "", ""
    lines = (done.stdout or done.stderr).strip().splitlines()
    failed = next((line.split()[1] for line in lines if line.startswith(("FAILED ", "ERROR "))
                   and len(line.split()) > 1), "")
    outcome = "survived" if done.returncode == 0 else "killed"
    return outcome, time.monotonic() - started, lines[-1] if lines else "", failed


def failing_unmutated(root: Path, tests: list) -> list:
    """Return those of the tests that fail on the unmutated package, all run once."""
    if not tests:
        return []
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rf", "-n", "0", "-p",
                           "no:cacheprovider", "-o", "addopts=", *tests], cwd=root,
                          capture_output=True, text=True, timeout=1800)
    return sorted({line.split()[1] for line in done.stdout.splitlines()
                   if line.startswith(("FAILED ", "ERROR ")) and len(line.split()) > 1})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=300, help="mutants in the sample")
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once")
    parser.add_argument("--modules", default=",".join(MODULE_TESTS))
    parser.add_argument("--budget-s", type=float, default=3600.0,
                        help="stop starting mutants after this long")
    parser.add_argument("--out", default="mutation.json", help="the results, as JSON")
    parser.add_argument("--only", metavar="FILE",
                        help="run again only the survivors of this earlier results file "
                             "(same seed and sample), without the baseline")
    parser.add_argument("--rest", metavar="FILE",
                        help="run only the drawn mutants this earlier results file did not "
                             "run (its time ran out), without the baseline")
    args = parser.parse_args(argv)
    for module, names in MODULE_TESTS.items():  # a test file split off or renamed since
        missing = [n for n in names if not (ROOT / "tests" / f"{n}.py").exists()]
        if missing or names[0] != f"test_{module}":
            parser.error(f"MODULE_TESTS[{module!r}]: {', '.join(missing) or 'its own file'} "
                         f"{'missing' if missing else 'not first'}")
    started = time.monotonic()
    by_module = {m: mutants_of(m) for m in args.modules.split(",")}
    sample = [m for m in map(rendered, stratified(by_module, args.sample, args.seed))
              if m["diff"]]  # a mutation that renders the same source is none
    if args.only:
        wanted = {(r["module"], r["number"])
                  for r in json.loads(Path(args.only).read_text())["survivors"]}
        sample = [m for m in sample if (m["module"], m["number"]) in wanted]
    if args.rest:
        done = {(r["module"], r["number"])
                for r in json.loads(Path(args.rest).read_text())["results"]}
        sample = [m for m in sample if (m["module"], m["number"]) not in done]
    print(f"mutants: {sum(len(m) for m in by_module.values()):,} in "
          f"{len(by_module)} modules ({', '.join(f'{k} {len(v)}' for k, v in by_module.items())})"
          f"; sample {len(sample)}, seed {args.seed}", flush=True)
    roots = [scratch_copy() for _ in range(args.jobs)]
    # the unmutated modules' tests must pass, and their time bounds each mutant's
    baseline = {}

    def timed(module):
        root = free.pop()
        try:
            for _ in range(3):  # a test that fails now and then under load: passes once
                outcome, seconds, last, _ = run_tests(root, module, 1800)
                if outcome == "survived":
                    break
        finally:
            free.append(root)
        if outcome != "survived":
            raise SystemExit(f"the unmutated {module}'s tests do not pass ({root}): {last}")
        baseline[module] = seconds

    free = list(roots)
    if args.only or args.rest:  # the earlier run's unmutated times bound each mutant's
        earlier = json.loads(Path(args.only or args.rest).read_text()).get("baseline_s", {})
        baseline.update((m, max(earlier.get(m, 300.0), 60.0)) for m in by_module)
    else:
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(timed, by_module))
    print("baseline: " + ", ".join(f"{m} {s:.0f} s" for m, s in baseline.items()), flush=True)
    results = []

    def judge(mutant):
        root = free.pop()
        target = root / PACKAGE / f"{mutant['module']}.py"
        original = target.read_text()
        try:
            target.write_text(mutant["code"])
            outcome, seconds, last, failed = run_tests(root, mutant["module"],
                                                       3 * baseline[mutant["module"]] + 30)
        finally:
            target.write_text(original)
            free.append(root)
        found = {k: v for k, v in mutant.items() if k != "code"}
        found.update(outcome=outcome, seconds=round(seconds, 1), last=last, failed=failed)
        results.append(found)
        mark = {"killed": ".", "timeout": "T", "survived": "S"}[outcome]
        print(f"{mark} {len(results)}/{len(sample)} {mutant['module']}:{mutant['line']} "
              f"{seconds:.0f} s", flush=True)
        return found

    with ThreadPoolExecutor(args.jobs) as pool:
        futures = []
        for mutant in sample:
            futures.append(pool.submit(
                lambda m=mutant: None if time.monotonic() - started > args.budget_s
                else judge(m)))
        for future in futures:
            future.result()
    # a test that killed a mutant but fails unmutated too (under load) proves nothing: the
    # mutants it killed are run again
    killers = sorted({r["failed"] for r in results if r["outcome"] == "killed" and r["failed"]})
    flaky = failing_unmutated(roots[0], killers)
    again = [r for r in results if r["failed"] in flaky]
    if flaky:
        print(f"failed unmutated too: {', '.join(flaky)}; {len(again)} mutants again", flush=True)
        drawn = {(m["module"], m["number"]): m for m in sample}
        for r in again:
            results.remove(r)
            judge(drawn[(r["module"], r["number"])])
    for root in roots:
        shutil.rmtree(root.parent, ignore_errors=True)
    run = [r for r in results]
    killed = sum(r["outcome"] in ("killed", "timeout") for r in run)
    survivors = sorted((r for r in run if r["outcome"] == "survived"),
                       key=lambda r: (r["module"], r["line"]))
    elapsed = time.monotonic() - started
    document = {
        "seed": args.seed, "sample": len(sample), "run": len(run), "killed": killed,
        "timeouts": sum(r["outcome"] == "timeout" for r in run),
        "survived": len(survivors), "score": round(killed / len(run), 4) if run else None,
        "mutants_by_module": {m: len(v) for m, v in by_module.items()},
        "by_module": {m: {"run": sum(r["module"] == m for r in run),
                          "killed": sum(r["module"] == m and r["outcome"] != "survived"
                                        for r in run)} for m in by_module},
        "baseline_s": {m: round(s, 1) for m, s in baseline.items()},
        "elapsed_s": round(elapsed), "jobs": args.jobs, "flaky": flaky,
        "module_tests": MODULE_TESTS,
        "survivors": survivors, "results": sorted(run, key=lambda r: (r["module"], r["line"]))}
    Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    print(f"killed {killed} of {len(run)} ({100 * killed / max(len(run), 1):.1f}%), "
          f"{len(survivors)} survived, in {elapsed / 60:.0f} min; {args.out}")
    for r in survivors:
        print(f"  {r['module']}.py:{r['line']} in {r['function']}:\n    "
              + r["diff"].replace("\n", "\n    "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
