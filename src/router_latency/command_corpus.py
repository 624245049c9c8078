"""The corpus command: its parser, its handler, and what it prints of the corpus it wrote
(corpus_lines, which the demo prints too)."""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path
from typing import Any, List

from .constants import DEFAULT_GLOB, EXIT_OK, PROMPT_KEYS
from .errors import RouterLatencyError
from .files import check_distinct_files, check_writable_target, write_output
from .corpus import (build_corpus, corpus_bytes, CORPUS_FORMATS, default_boundary_cases,
                     load_boundary_cases)
from .report import render_table
from .console import emit, stderr_line
from .command_options import HelpFormatter

__all__ = ["add_corpus_parser", "corpus_lines"]


def add_corpus_parser(commands: Any) -> None:
    p = commands.add_parser("corpus", help="build the prompt corpus from a router repo",
                            formatter_class=HelpFormatter,
                            epilog="example: corpus --repo ../semantic-router --out corpus.json")
    p.add_argument("--repo", required=True, help="router repo checkout (reads DIR/e2e)")
    p.add_argument("-o", "--out", required=True, help="corpus file to write")
    p.add_argument("--glob", default=DEFAULT_GLOB, help="data files, relative to the repo")
    p.add_argument("--key", action="append", default=[], help="another prompt key (repeatable)")
    p.add_argument("--data-format", choices=CORPUS_FORMATS, default="json",
                   help="how each data file is read: json, prompts under the keys at any depth; "
                        "list, a JSON list of prompts; jsonl, a JSON value a line (a string is "
                        "a prompt); lines, one prompt a line of UTF-8 text")
    p.add_argument("--boundary", help="boundary-case file (default: the built-in cases, whose "
                                      "editable copy is corpus/boundary_cases.json)")
    p.add_argument("--no-boundary", action="store_true", help="append no boundary cases")
    p.add_argument("--force", action="store_true", help="overwrite an existing corpus file")
    p.set_defaults(func=cmd_corpus)


def no_corpus_files_text(repo: Path, pattern: str) -> str:
    """Return why a corpus found no data file, and what to give instead."""
    text = f"no file matches {pattern}"
    if pattern != DEFAULT_GLOB or (repo / "e2e").is_dir():
        return text
    # a folder inside the repository (its e2e/ itself, say) or another folder altogether
    top = next((p for p in repo.resolve().parents if (p / "e2e").is_dir()), None)
    return (f"{text}: the folder has no e2e/; give the router repository's top folder"
            + (f" ({top})" if top else "") + " as --repo, or say where the data is with --glob")


def cmd_corpus(args: argparse.Namespace) -> int:
    check_writable_target(args.out, args.force)
    if args.no_boundary:
        boundary = []
    elif args.boundary:
        boundary = load_boundary_cases(Path(args.boundary))
    else:
        boundary = default_boundary_cases()
    keys = list(PROMPT_KEYS) + [k for k in args.key if k not in PROMPT_KEYS]
    check_distinct_files([("--boundary", args.boundary)], [("--out", args.out)])
    corpus = build_corpus(Path(args.repo), pattern=args.glob, keys=keys, boundary=boundary,
                          warn=lambda m: stderr_line(f"warning: {m}"), form=args.data_format)
    if not corpus["files"]:
        raise RouterLatencyError(no_corpus_files_text(Path(args.repo), args.glob), args.repo)
    check_distinct_files([("data file", str(Path(args.repo) / rel)) for rel in corpus["files"]],
                         [("--out", args.out)])
    data = corpus_bytes(corpus)
    write_output(args.out, data)
    emit(corpus_lines(corpus, data, args.repo, args.out),
         sys.stderr if args.out == "-" else sys.stdout)
    return EXIT_OK


def corpus_lines(corpus: dict, data: bytes, repo_text: str, out: str) -> List[str]:
    """Return what `corpus` prints of the corpus it wrote."""
    import hashlib
    source = corpus["source"]
    lines = [f"corpus: {len(corpus['prompts'])} prompts ({source['from_repo']} distinct from "
             f"{len(corpus['files'])} files, {source['boundary_cases']} boundary cases)",
             f"repo: {repo_text}" + (f" at {source['commit']}" if source["commit"] else "")]
    new_per_file = collections.Counter(prompt["source"] for prompt in corpus["prompts"])
    rows = [[path, str(found), str(new_per_file.get(path, 0))]
            for path, found in corpus["files"].items()]
    lines += [f"  {line}" for line in render_table(["file", "prompts", "new"], rows,
                                                    right=[False])]
    return lines + [f"{hashlib.sha256(data).hexdigest()}  {out}"]
