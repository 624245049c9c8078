"""The command line's top: its parser (Parser: one-line errors) built from each command's
registration (add_<command>_parser, in command_<command>.py), main() and console_main()."""

from __future__ import annotations

import argparse
import io
import os
import re
import signal
import sys
import threading
from typing import Any, List, NoReturn, Optional, Sequence

from .constants import __version__, EXIT_SIGNAL, EXIT_USAGE
from .errors import RouterLatencyError, SignalInterrupt
from .formats import COMMAND_OUTPUTS
from .console import emit, stderr_line
from .command_corpus import add_corpus_parser
from .command_run import add_run_parser, cmd_run
from .command_compare import add_compare_parser
from .command_rounds import add_rounds_parser
from .command_record import add_record_parser
from .command_history import add_history_parser
from .command_simulate import add_simulate_parser, cmd_simulate
from .command_demo import add_demo_parser

__all__: List[str] = []


DESCRIPTION = ("Measures a router's /api/v1/routing/preview endpoint with a fixed prompt "
               "corpus, compares two\nruns, and judges interleaved rounds of two "
               "configurations with paired Student-t intervals.")


# a --format asked for that is a file of its own: the command and the option that write it
FORMAT_FILES = {asked: (command, f"--{name} FILE")
                for command, outputs in COMMAND_OUTPUTS.items()
                for name, exporter in outputs.files.items() for asked in exporter.asked_as}


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: router-latency: error: ...; a mistyped
    option is named first, with the closest real one, whatever else is missing."""

    words: Sequence[str] = ()  # the arguments this parser was given

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self.words = list(sys.argv[1:] if args is None else args)
        known, extras = super().parse_known_args(args, namespace)
        if self._subparsers is None and any(w.startswith("--") for w in extras):
            self.error(self.mistyped_option() or f"unrecognized arguments: {' '.join(extras)}")
        return known, extras

    def error(self, message: str) -> NoReturn:
        message = self.unknown_command() or self.mistyped_option() or message
        found = re.match(r"argument --format: invalid choice: '([^']*)'", message)
        if found and found.group(1).lower() in FORMAT_FILES:
            command, wanted = FORMAT_FILES[found.group(1).lower()]
            where = "" if wanted.split()[0] in self._option_string_actions else f" of {command}"
            message += f"; {found.group(1)} is a file of its own: {wanted}{where}"
        self.exit(EXIT_USAGE, f"router-latency: error: {message} ({self.prog})\n")

    def unknown_command(self) -> str:
        """Return the error for a command word this parser does not have, naming the closest
        one it has (a mistyped command is named before the options it was given); '' when
        the command is known or this parser takes none."""
        import difflib
        if self._subparsers is None:
            return ""
        commands = [name for action in self._subparsers._group_actions
                    for name in getattr(action, "choices", None) or ()]
        word = next((w for w in self.words if not w.startswith("-")), None)
        if word is None or word in commands:
            return ""
        close = difflib.get_close_matches(word, commands, n=1, cutoff=0.6)
        return (f"unknown command {word!r}: " + (f"did you mean {close[0]}?" if close else
                                                  f"the commands are {', '.join(commands)}"))

    def mistyped_option(self) -> str:
        """Return the error for the first option this parser does not know, naming the
        closest one it does; '' when there is none."""
        import difflib
        known = [o for o in self._option_string_actions if o.startswith("--")]
        for word in self.words:
            if word == "--":
                break
            option = word.split("=", 1)[0]
            if not option.startswith("--") or option in self._option_string_actions \
                    or any(o.startswith(option) for o in known):  # an abbreviation
                continue
            close = difflib.get_close_matches(option, known, n=1, cutoff=0.75)
            return f"unrecognized option {option}" + (f": did you mean {close[0]}?"
                                                      if close else "")
        return ""

    def _print_message(self, message: str, file: Any = None) -> None:
        if message:  # --help | head: argparse's own writes, and the flush at exit, stay quiet
            emit([message.rstrip("\n")], file or sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="router-latency", description=DESCRIPTION,
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog="exit codes: 0 ok, 1 gate failed, 2 bad input, 3 inconclusive "
                           "(rounds), 130/143/129 interrupted")
    parser.add_argument("--version", action="version", version=f"router-latency {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser,
                                     metavar="{corpus,run,compare,rounds,record,history,"
                                             "simulate,demo}")
    for add in (add_corpus_parser, add_run_parser, add_compare_parser, add_rounds_parser,
                add_record_parser, add_history_parser, add_simulate_parser, add_demo_parser):
        add(commands)  # in this order in --help
    return parser


def raise_interrupt(signum: int, frame: Any) -> None:
    """The handler of SIGTERM and SIGHUP outside run and simulate."""
    raise SignalInterrupt(signum)


# rounds/run_rounds.sh checks every command line it runs before a router starts (run --check
# of each side, rounds on an empty folder) in one start of the tool, not one a line
CHECK_LINES = "--check-lines"


def command_lines(read: bytes) -> List[List[str]]:
    """Return the command lines of --check-lines' input (see check_lines), or raise
    RouterLatencyError saying what is wrong, and on which line where it is one line's."""
    fields = [os.fsdecode(field) for field in read.split(b"\0")]
    if fields.pop():
        raise RouterLatencyError("the input does not end with a NUL", CHECK_LINES)
    def clipped(text: str) -> str:
        return text if len(text) <= 20 else text[:20] + "..."

    lines: List[List[str]] = []
    while fields:
        said, follow = fields[0], len(fields) - 1
        line = f"line {len(lines) + 1}"
        if not (said.isascii() and said.isdigit()):
            raise RouterLatencyError(f"{line} begins with {clipped(said)!r}, not its count of "
                                     f"words", CHECK_LINES)
        # no more digits than the fields could count: int() refuses over 4,300 of them
        digits = said.lstrip("0") or "0"
        count = int(digits) if len(digits) <= len(str(follow)) else follow + 1
        if count > follow:
            raise RouterLatencyError(f"{line} says {clipped(digits)} words; {follow} "
                                     f"follow{'s' if follow == 1 else ''}", CHECK_LINES)
        lines.append(fields[1:1 + count])
        fields = fields[1 + count:]
    return lines


def check_lines(source: Any, answer: Any) -> int:
    """Run each command line of source as main() runs it and write its exit code and its
    output (stdout and stderr together, as 2>&1 has them) to answer; return 0. Each line is
    its count of words, then its words; every field of both is ended by NUL (bytes, decoded
    as the command line's arguments are)."""
    import contextlib
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"  # as the line run alone
    try:
        lines = command_lines(source.read())
    except RouterLatencyError as exc:  # all read before any runs: a bad input answers nothing
        stderr_line(f"error: {exc}")
        return EXIT_USAGE
    for words in lines:
        output = io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            code = main(words)
        answer.write(f"{code}\0{output.getvalue()}\0".encode(encoding, "backslashreplace"))
    answer.flush()
    return 0


def main(argv: Optional[Sequence[str]] = None, *, program: bool = False) -> int:
    """Run the command line; return the exit code. program: run as the program (the file, the
    console script, python -m), not called from Python."""
    previous: dict = {}
    if list(sys.argv[1:] if argv is None else argv) == [CHECK_LINES]:
        return check_lines(sys.stdin.buffer, sys.stdout.buffer)
    try:
        if program and threading.current_thread() is threading.main_thread():
            # the early handler each entry installs (the top of the file, __main__.run) exits
            # at once; from here on an interrupt is a KeyboardInterrupt, which the commands
            # and the end of main handle
            signal.signal(signal.SIGINT, signal.default_int_handler)
        for stream in (sys.stdout, sys.stderr):
            try:  # a path or label of bytes that are not UTF-8 is shown escaped, never a crash
                if isinstance(stream, io.TextIOWrapper):  # not a stream put in its place
                    stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        if args.func not in (cmd_run, cmd_simulate) \
                and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGHUP):  # run and simulate handle their own
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    previous[signum] = signal.signal(signum, raise_interrupt)
        return args.func(args)
    except RouterLatencyError as exc:
        stderr_line(f"error: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        caught = exc.signum if isinstance(exc, SignalInterrupt) else int(signal.SIGINT)
        stderr_line(f"interrupted by {signal.Signals(caught).name}; a file being written was "
                    f"finished or removed, none is left half-written")
        return EXIT_SIGNAL[signal.Signals(caught)]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def console_main() -> None:
    """The command's entry (the console script, `python router_latency.py`): main's exit code.
    A Ctrl-C pressed again while Python joins the last threads would end it by SIGINT with a
    traceback, after the file was written and the code chosen: from here on it is ignored."""
    status = main(program=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(status)
