"""Files: reading with size limits, JSON without duplicate keys, atomic writes, output checks."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import select
import signal
import stat
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, List, Optional, Set, Tuple, Union

from .constants import lazy_pattern
from .errors import RouterLatencyError

__all__ = [
    "check_distinct_files", "check_folder_accepts_a_file", "check_schema", "check_writable_target",
    "append_whole", "drop_output", "dump_json", "locked_append", "parse_json", "read_bytes",
    "read_json", "rescue_copy", "unique_keys", "write_atomic", "write_output",
]


# the largest run file: 1,000,000 requests a pass (MAX_PASS_REQUESTS) are ~140 MB, and three
# such passes fit; reading one takes about 5.6 times its size in memory (docs/failures.md)
MAX_INPUT_BYTES = 512 * 1024 * 1024


def read_bytes(path: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """Return a file's bytes, or raise a one-line error naming it; a file larger than limit
    is refused before any of it is read."""
    p = Path(path)
    if p.is_dir():
        raise RouterLatencyError("is a folder, not a file", str(path))
    try:
        with open(p, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > limit:
                raise RouterLatencyError(f"{size:,} bytes, larger than the {limit // 2**20:,} "
                                         f"MiB this tool reads", str(path))
            data = handle.read(limit + 1)  # a file growing meanwhile is cut here, and refused
    except FileNotFoundError:
        raise RouterLatencyError("no such file", str(path)) from None
    except OSError as exc:
        raise RouterLatencyError(f"cannot read: {exc.strerror or exc}", str(path)) from None
    if len(data) > limit:
        raise RouterLatencyError(f"larger than the {limit // 2**20:,} MiB this tool reads",
                                 str(path))
    if not data or data.isspace():  # no stripped copy of a large file
        raise RouterLatencyError("the file is empty", str(path))
    return data


def parse_json(data: Union[bytes, list], path: str,
               pairs_hook: Optional[Callable[[list], Any]] = None) -> Any:
    """Return the JSON value of data, or raise an error naming path and the position; each
    object is made by pairs_hook (unique_keys: a dict, a key given twice refused). A list
    holding the bytes is emptied once they are decoded, so that a large file's bytes and
    its text are not both held while it is parsed."""
    try:
        text = (data.pop() if isinstance(data, list) else data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RouterLatencyError(f"not UTF-8 (byte {exc.start})", str(path)) from None
    try:
        return json.loads(text, parse_constant=no_constant,
                          object_pairs_hook=pairs_hook or unique_keys)
    except json.JSONDecodeError as exc:
        raise RouterLatencyError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", str(path)) from None
    except ValueError as exc:
        raise RouterLatencyError(f"invalid JSON: {exc}", str(path)) from None
    except RecursionError:
        raise RouterLatencyError("invalid JSON: nested deeper than Python's JSON reader goes "
                                 "(about 900 levels)", str(path)) from None


def no_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def unique_keys(pairs: list) -> dict:
    """Return a JSON object's dict; raise when a key comes twice (a hand-edited file saying
    "complete" twice must not be read by whichever comes last)."""
    document = dict(pairs)
    if len(document) < len(pairs):
        seen: set = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key!r} appears twice in one object")
            seen.add(key)
    return document


def read_json(path, limit: int = MAX_INPUT_BYTES) -> Any:
    """Return the JSON value of a file of at most limit bytes."""
    return parse_json(read_bytes(str(path), limit), str(path))


def check_schema(document: Any, expected: str, path: str) -> None:
    """Raise unless document is an object of the expected schema and version."""
    if not isinstance(document, dict):
        raise RouterLatencyError(f"expected a {expected} object", str(path))
    schema = document.get("schema")
    name, _, version = expected.rpartition("/")
    if isinstance(schema, str) and schema.startswith(name + "/") and schema != expected:
        found = schema.rpartition("/")[2]
        if found.isdigit() and int(found) > int(version):
            raise RouterLatencyError(
                f"schema {schema} is newer than this tool reads ({expected}); upgrade "
                f"router-latency", f"{path}: schema")
    if schema is None:  # another kind of file: a --boundary list, a Go router's answer
        raise RouterLatencyError(f"no schema member: not a {expected} file", f"{path}: schema")
    if schema != expected:
        raise RouterLatencyError(f"schema is {schema!r}, expected {expected!r}", f"{path}: schema")


class DeferredSignals:
    """Hold SIGINT, SIGTERM and SIGHUP back while a file is written and renamed: one that
    comes meanwhile is delivered after, so that the temporary file is either renamed or
    removed, never left behind between mkstemp and the rename."""

    HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __enter__(self) -> None:
        self.previous = signal.pthread_sigmask(signal.SIG_BLOCK, self.HELD) \
            if hasattr(signal, "pthread_sigmask") else None

    def __exit__(self, *exc: Any) -> None:
        if self.previous is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.previous)


def write_atomic(path: str, data) -> None:
    """Write data (bytes, or an iterable of bytes) to path through a temporary file in the
    same folder, fsync and rename; a signal meanwhile waits until the rename is done. Only a
    regular file (or a new path) is replaced so: a link is followed (link_target) and the
    file it names replaced, the link kept; a character device or a pipe (/dev/null,
    /dev/stdout, a FIFO) is written through; anything else is refused (special_target)."""
    target = link_target(path)
    if special_target(target) is not None:
        write_through(target, data, path)
        return
    with DeferredSignals():
        _write_atomic(target, data, path)


# Linux's own bound on the symbolic links one lookup follows before it says ELOOP
MAX_LINK_HOPS = 40


def link_target(path: str) -> str:
    """Return the path an output is written at: path, or the end of its chain of symbolic
    links (each read from its own folder), or the first of the process's own open files on
    the way (/dev/stdout). Raise a one-line error for a loop or a chain over MAX_LINK_HOPS:
    os.path.realpath returns a link of a loop, which os.replace then overwrote."""
    current, chain = path, [path]
    seen: Set[Tuple[int, int]] = set()
    while not OWN_FD_PATH.fullmatch(os.path.abspath(current)):
        try:
            status = os.lstat(current)
        except OSError:
            return current  # a new path, or one the write itself will name the fault of
        if not stat.S_ISLNK(status.st_mode):
            return current
        if (status.st_dev, status.st_ino) in seen or len(seen) >= MAX_LINK_HOPS:
            what = "a loop of symbolic links" if (status.st_dev, status.st_ino) in seen \
                else f"more than {MAX_LINK_HOPS} symbolic links in a row"
            shown = " -> ".join(chain[:4]) + (" -> ..." if len(chain) > 4 else "")
            raise RouterLatencyError(f"{what} ({shown}); nothing was written", str(path))
        seen.add((status.st_dev, status.st_ino))
        try:
            current = os.path.join(os.path.dirname(current), os.readlink(current))
        except OSError:
            return current
        chain.append(current)
    return current


# the names of a process's own open files: written through whatever they lead to, appended
# to (a `> out.txt` of the shell holds what the tool printed before)
OWN_FD_PATH = lazy_pattern(r"/dev/(stdout|stderr|fd/[0-9]+)|/proc/(self|[0-9]+)/fd/[0-9]+")
WRITTEN_THROUGH = {stat.S_IFCHR: "a character device", stat.S_IFIFO: "a pipe"}
REFUSED_KINDS = {stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket",
                 stat.S_IFDIR: "a folder"}


def special_target(path: str) -> Optional[str]:
    """Return what an output path names when it is no regular file to replace: 'a character
    device' or 'a pipe' (written through), 'an open file' (one of the process's own, through
    /dev/stdout or /proc/self/fd: written through); None for a regular file or a new path.
    Raise a one-line error for what is never written (a block device, a socket)."""
    if OWN_FD_PATH.fullmatch(os.path.abspath(path)):
        return "an open file"
    try:
        kind = stat.S_IFMT(os.stat(path).st_mode)
    except OSError:
        return None  # a new path (or a link to one): made as a regular file
    if kind in REFUSED_KINDS:
        raise RouterLatencyError(f"is {REFUSED_KINDS[kind]}; outputs go to regular files, "
                                 f"character devices (/dev/null) and pipes", str(path))
    return WRITTEN_THROUGH.get(kind)


def own_descriptor(path: str) -> Optional[int]:
    """Return the number of the process's own open file a path names (/dev/stdout: 1,
    /dev/fd/N, /proc/self/fd/N, /proc/<this pid>/fd/N), or None."""
    name = os.path.abspath(path)
    if not OWN_FD_PATH.fullmatch(name):
        return None
    if name in ("/dev/stdout", "/dev/stderr"):
        return 1 if name == "/dev/stdout" else 2
    parts = name.split("/")  # ['', 'dev', 'fd', N] or ['', 'proc', PID, 'fd', N]
    if parts[1] == "proc" and parts[2] not in ("self", str(os.getpid())):
        return None  # another process's: opened, appended to
    return int(parts[-1])


def write_through(path: str, data, shown: Optional[str] = None) -> None:
    """Write data to a character device, a pipe or an open file of the process, as it is
    (nothing to rename over it): a FIFO nobody reads is refused rather than waited on. One of
    the process's own open files (/dev/stdout) is written through the descriptor already
    open, after what Python holds for it: opened again, it began at offset 0 of the shell's
    `> out.txt`, and the text printed after it landed over it."""
    shown = shown or path
    own = own_descriptor(path)
    if own is not None:
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None and stream.fileno() == own:
                    stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        try:
            write_chunks(own, data)
        except OSError as exc:
            raise RouterLatencyError(f"cannot write: {exc.strerror or exc}", str(shown)) \
                from None
        return
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK  # non-blocking: a FIFO without a reader
    if OWN_FD_PATH.fullmatch(os.path.abspath(path)):
        flags |= os.O_APPEND
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise RouterLatencyError("a FIFO that nobody reads; start its reader first",
                                     str(shown)) from None
        raise RouterLatencyError(f"cannot write: {exc.strerror or exc}", str(shown)) from None
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        write_chunks(fd, data)
    except OSError as exc:
        raise RouterLatencyError(f"cannot write: {exc.strerror or exc}", str(shown)) from None
    finally:
        os.close(fd)


def write_chunks(fd: int, data) -> None:
    """Write data (bytes, or an iterable of bytes) whole to a descriptor, waiting on one
    left non-blocking."""
    for chunk in ([data] if isinstance(data, bytes) else data):
        view = memoryview(chunk)
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                select.select([], [fd], [])


def append_whole(path: str, data: bytes) -> Optional[str]:
    """Append data to an existing file in one write (steps side by side do not interleave),
    whole or not at all: what a full disk let through of it is cut off again. Return None,
    or why nothing was appended."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)  # no O_CREAT: the runner creates it
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        return append_to(fd, data)
    finally:
        os.close(fd)


def append_to(fd: int, data: bytes) -> Optional[str]:
    """Append data through a descriptor opened O_APPEND, in one write, whole or not at all;
    return None, or why nothing was appended."""
    try:
        start = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
        except OSError as exc:
            written, reason = 0, exc.strerror or str(exc)
        else:
            reason = f"only {written:,} of its {len(data):,} bytes could be written" \
                if written < len(data) else ""
        if not reason:
            return None
        if written and stat.S_ISREG(os.fstat(fd).st_mode):
            end = os.lseek(fd, 0, os.SEEK_CUR)  # where this write ended: its start is before
            os.ftruncate(fd, max(end - written, start))
        return f"{reason}; nothing of it was left in the file"
    except OSError as exc:
        return f"{exc.strerror or exc}; the file may hold a part of it"


# how long a writer waits for another's lock on a file it appends to (locked_append): two
# `history add` on one machine take turns; a stuck one is named, not waited on for ever
LOCK_WAIT_S = 60.0
LOCK_POLL_S = 0.05  # how often a writer waiting for the lock asks again


def locked_append(path: str, lines_of: Callable[[bytes], bytes],
                  wait_s: Optional[float] = None, limit: int = MAX_INPUT_BYTES) -> None:
    """Append to path (made when missing) the bytes lines_of returns for what the file holds,
    read and appended under an exclusive advisory lock on the file (flock), so that writers
    on one machine take turns and none loses another's lines (a read, then a rename, lost 11
    of 24 lines to 6 adds at once). The append is one write, whole or nothing; lines_of
    raising leaves the file as it was. Raise a one-line error when the lock is not had
    within wait_s seconds (LOCK_WAIT_S)."""
    target = link_target(path)
    try:
        fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOCTTY, 0o666)
    except OSError as exc:
        raise RouterLatencyError(f"cannot write: {exc.strerror or exc}", str(path)) from None
    try:
        take_lock(fd, path, LOCK_WAIT_S if wait_s is None else wait_s)
        held = read_held(fd, path, limit)
        data = lines_of(held)
        if not data:
            return
        with DeferredSignals():
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                write_chunks(fd, data)  # a device or a pipe: written through
                return
            reason = append_to(fd, data)
            if reason is not None:
                raise RouterLatencyError(f"cannot write: {reason}", str(path))
            os.fsync(fd)
    except OSError as exc:
        raise RouterLatencyError(f"cannot write: {exc.strerror or exc}", str(path)) from None
    finally:
        os.close(fd)  # and the lock with it


def take_lock(fd: int, path: str, wait_s: float) -> None:
    """Take an exclusive advisory lock on an open file, waiting at most wait_s seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        except OSError as exc:  # a file system without locks (some NFS mounts): ENOLCK
            raise RouterLatencyError(f"cannot lock the file: {exc.strerror or exc}; it is "
                                     f"written under a lock so that no writer's lines are "
                                     f"lost", str(path)) from None
        if time.monotonic() >= deadline:
            raise RouterLatencyError(
                f"another process has held the file's lock for {wait_s:g} s (a history add "
                f"still running, or a stuck one: fuser names it); nothing was written",
                str(path))
        time.sleep(LOCK_POLL_S)


def read_held(fd: int, path: str, limit: int) -> bytes:
    """Return what an open regular file holds (b"" for anything else), refused beyond limit."""
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        return b""
    if status.st_size > limit:
        raise RouterLatencyError(f"{status.st_size:,} bytes, larger than the "
                                 f"{limit // 2**20:,} MiB this tool reads", str(path))
    chunks: List[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)
        if offset > limit:
            raise RouterLatencyError(f"larger than the {limit // 2**20:,} MiB this tool "
                                     f"reads", str(path))


def _write_atomic(path: str, data, shown: str) -> None:
    import tempfile
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    tmp_name = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), output_mode())  # mkstemp's 0600 hides it from a team
            for chunk in ([data] if isinstance(data, bytes) else data):
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
        tmp_name = None
        try:
            dir_fd = os.open(folder, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dir_fd)
        except OSError:
            pass  # some filesystems refuse fsync on a folder; the rename itself is done
        finally:
            os.close(dir_fd)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise RouterLatencyError(
            f"cannot write: {reason}; any previous file is untouched", str(shown)) from None
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass


def output_mode() -> int:
    """Return the mode of a new output file: read and write for all, less the umask."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)  # without /proc, reading the umask means setting it, and back
    os.umask(mask)
    return 0o666 & ~mask


def rescue_copy(chunks: Iterable[bytes], out: str) -> str:
    """Save measurements that could not be written where asked; return where they went. A
    copy that cannot be written whole is removed, not left truncated."""
    import tempfile
    path = None
    try:
        fd, path = tempfile.mkstemp(prefix=f"router-latency-{Path(out).stem}-", suffix=".json")
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), output_mode())
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        return f"the measurements were saved to {path}"
    except OSError as exc:
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass
        return f"the measurements could not be saved anywhere ({exc.strerror or exc})"


def drop_output(stream: Any) -> None:
    """Send what is still to be written to a stream nobody reads any more (a pipe `| head`
    closed, a full disk) to /dev/null, so that neither it nor Python's flush at exit fails."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def write_output(path: str, data) -> None:
    """Write data (bytes, or an iterable of bytes) to path atomically, or to standard output
    when path is '-'."""
    if path != "-":
        write_atomic(path, data)
        return
    try:
        sys.stdout.flush()
        for chunk in ([data] if isinstance(data, bytes) else data):
            sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    except OSError as exc:
        drop_output(sys.stdout)
        raise RouterLatencyError(f"cannot write: {exc.strerror or exc}",
                                 "standard output") from None


def check_writable_target(path: str, force: bool) -> None:
    """Raise before any work when the output cannot or must not be written. A character
    device or a pipe is written through (no --force: nothing is replaced); a link is
    followed, and the file it names is what is replaced."""
    if path == "-" or special_target(path) is not None:
        return  # standard output, or written through
    target = Path(path)
    if target.is_dir():
        raise RouterLatencyError("is a folder, not a file", path)
    if target.exists() and not force:
        raise RouterLatencyError("exists; pass --force to overwrite it", path)
    folder = output_folder(path)
    if not folder.is_dir():
        raise RouterLatencyError("the folder does not exist", path)
    if not os.access(folder, os.W_OK):
        raise RouterLatencyError("the folder is not writable", path)


def output_folder(path: str) -> Path:
    """Return the folder an output's temporary file is made in: that of the file a link
    names, else the path's own."""
    real = Path(link_target(path))
    return real.parent if str(real.parent) else Path(".")


def check_folder_accepts_a_file(path: str) -> None:
    """Raise when the output's folder does not take a new file (a read-only mount, /proc, a
    full disk): a file is made there and removed, before anything is measured."""
    import tempfile
    if path == "-" or special_target(path) is not None:
        return
    folder = output_folder(path)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".router-latency-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise RouterLatencyError(f"the folder does not accept a new file: "
                                 f"{exc.strerror or exc}", path) from None


def file_identity(path: str) -> Tuple[str, Optional[Tuple[int, int]]]:
    """Return what tells a file from another: its resolved path, and its device and inode
    when it exists (a hard link or a bind mount has another path but the same inode)."""
    try:
        status = os.stat(path)
        inode = (status.st_dev, status.st_ino)
    except (OSError, ValueError):
        inode = None
    return os.path.realpath(path), inode


def check_distinct_files(inputs: Iterable[Tuple[str, Optional[Union[str, Path]]]],
                         outputs: Iterable[Tuple[str, Optional[Union[str, Path]]]]) -> None:
    """Raise before anything is written when an output (option, path) is an input or another
    output: measured data must never be overwritten by a report of it."""
    known: list = []  # (option, path, is an output, identity)
    for option, path, output in [(o, p, False) for o, p in inputs if p] + \
            [(o, p, True) for o, p in outputs if p]:
        # '-' twice: two documents mixed on standard output (or in one file named '-')
        real, inode = ("-", None) if output and path == "-" else file_identity(str(path))
        for other, other_path, other_output, (other_real, other_inode) in known:
            if (output or other_output) and (real == other_real or (
                    inode is not None and inode == other_inode)):
                raise RouterLatencyError(
                    f"{option} {path} is the same file as {other} {other_path}; an output "
                    f"never overwrites an input or another output", option)
        known.append((option, path, output, (real, inode)))


def dump_json(document: Any) -> bytes:
    """Return the bytes a result document is written as."""
    return (json.dumps(document, indent=1, ensure_ascii=False, allow_nan=False) + "\n") \
        .encode("utf-8", "backslashreplace")  # a lone surrogate: its JSON escape, \udcff
