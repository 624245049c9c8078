"""The HTTP/1.1 client: endpoints, request bytes, the incremental response parser,
connections, sockets and TLS, and the loopback servers' accept helpers and whole responses.
What an answer means is meaning.py's."""

from __future__ import annotations

import errno
import math
import re
import select
import threading
import time
import urllib.parse
from typing import Callable, cast, Optional, Sequence, Tuple, Type, TYPE_CHECKING

from .constants import (__version__, lazy_pattern, MAX_REASON_CHARS, NamedTuple, PREVIEW_PATH,
                        STOP_POLL_S)
from .errors import RouterLatencyError
from .words import secret_forms

if TYPE_CHECKING:
    import socket
    import ssl

__all__ = [
    "accept_connections", "blocked_errors", "bracketed", "Connection", "encode_request",
    "Endpoint", "http_response", "malformed", "open_socket", "parse_endpoint", "RequestFailed",
    "ResponseReader", "secret_values", "stop_accepting", "tls_context",
]


MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_HEAD_BYTES = 65536  # no server sends a response head this long; a chunk line neither
MAX_LENGTH_DIGITS = 19  # a Content-Length longer than this is none an 8 MB body can have
MIN_SECRET_CHARS = 4  # a --header value or token this long or longer is scrubbed from texts
HEX_DIGITS = b"0123456789abcdefABCDEF"
CHUNK_SIZE_PATTERN = re.compile(rb"[0-9A-Fa-f]{1,16}")  # hex digits only, as Go's client reads
OBS_FOLD = re.compile(rb"\r\n[ \t]+")  # a header line continued on the next (RFC 9112 5.2)
# the empty line ending a head whose lines end in a bare LF, which RFC 9112 section 2.2 lets a
# client take and Go's client takes; looked for only where no CRLF CRLF is found
BARE_LF_HEAD_END = re.compile(rb"\n\r?\n")
BARE_LF = re.compile(rb"(?<!\r)\n")
CONNECT_TIMEOUT_S = 5.0  # readiness checks and scrapes: connect and TLS handshake


class Endpoint(NamedTuple):
    scheme: str
    host: str
    port: int
    path: str
    shown: str  # the URL as it may be printed and stored: no credentials
    authorization: Optional[str]


class RequestFailed(Exception):
    """A request that got no usable answer: its error kind ('interrupted' when the stop flag
    ended a wait), the status when one came, and what a person should read about it.
    `unanswered` is True when the connection ended, or the time ran out, before any byte of
    the answer arrived."""

    def __init__(self, kind: str, status: Optional[int] = None, detail: str = "", *,
                 unanswered: bool = False):
        super().__init__(kind)
        self.kind = kind
        self.status = status
        self.detail = detail
        self.unanswered = unanswered


def malformed(reason: str, status: Optional[int] = None) -> RequestFailed:
    """Return the failure of an answer this client cannot read, saying what was wrong."""
    return RequestFailed("malformed", status, reason[:MAX_REASON_CHARS])


def shown_bytes(value: bytes, limit: int = 16) -> str:
    """Return bytes from an answer as a message may quote them: escaped when short, else only
    their count (a cut value could show part of a secret the scrubbing cannot recognise)."""
    return repr(value)[1:] if len(value) <= limit else f"of {len(value):,} bytes"


def bracketed(host: str) -> str:
    """Return a host as it stands in a URL or a Host header: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def parse_endpoint(url: str, *, default_path: str = PREVIEW_PATH,
                   option: str = "--url") -> Endpoint:
    """Return the endpoint of a router URL; a base URL gets the preview path appended. No
    message about a URL quotes any of it: a password cut at '#', '/' or '?' would show."""
    if CONTROL_BYTES.search(url):
        raise RouterLatencyError("the URL holds a control character (a tab, a line break); "
                                 "percent-encode it", option)
    rest = url.partition("://")[2]
    host_end = min([rest.find(c) for c in "/?#" if c in rest] or [len(rest)])
    if "@" in rest[host_end:]:  # user:pa#ss@host reads as host 'user', port 'pa'
        raise RouterLatencyError(
            "the URL has an '@' after a '/', '?' or '#': a password holding those must be "
            "percent-encoded (%2F, %3F, %23), an '@' elsewhere written %40", option)
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise RouterLatencyError(
            "not a valid URL: the port is not a number from 0 to 65535" if "ort" in str(exc)
            else "not a valid URL: an IPv6 address goes in brackets, http://[::1]:8801",
            option) from None
    if parts.scheme not in ("http", "https"):
        # 'router:8801' parses as scheme 'router': without '://' there is no scheme at all
        raise RouterLatencyError(
            "the URL must start with http:// or https://" if "://" not in url
            else f"scheme {parts.scheme}:// is not supported, use http:// or https://", option)
    if not parts.hostname:
        raise RouterLatencyError("the URL has no host", option)
    port = port or (443 if parts.scheme == "https" else 80)
    path = request_target(parts.path if parts.path not in ("", "/") else default_path,
                          parts.query, option)
    authorization = None
    if parts.username is not None or parts.password is not None:
        import base64
        user = urllib.parse.unquote(parts.username or "")
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        authorization = f"Basic {token}"
    host = parts.hostname
    netloc = bracketed(host)
    if parts.port is not None:
        netloc += f":{parts.port}"
    shown = urllib.parse.urlunsplit((parts.scheme, netloc, *path.partition("?")[::2], ""))
    return Endpoint(parts.scheme, host, port, path, shown, authorization)


# what Go's net/url leaves as given in a path (validEncoded): the unreserved characters
# (letters, digits and -._~, which quote never encodes), the sub-delimiters, ':', '@', the
# brackets and '%' of an escape; in a query '?' as well. Anything else (a space, a letter
# beyond ASCII, '"', '<', '>', '\\', '^', '`', '{', '|', '}') is percent-encoded from its UTF-8
# bytes, upper-case hex, as Go's client sends it: POST /%E8%B7%AF%E7%94%B1/preview
PATH_SAFE = "!$&'()*+,;=:@[]/%"
BAD_ESCAPE = lazy_pattern(r"%(?![0-9A-Fa-f]{2})")
CONTROL_BYTES = lazy_pattern(r"[\x00-\x1f\x7f]")


def request_target(path: str, query: str, option: str) -> str:
    """Return the request target of a URL's path and query, percent-encoded where a request
    line cannot carry a character as it is (see PATH_SAFE); raise a one-line error, quoting
    nothing of the URL, for a '%' that starts no escape in the path (Go's url.Parse refuses
    it) or a control character anywhere (Python's urlsplit drops a tab or line break)."""
    if BAD_ESCAPE.search(path):
        raise RouterLatencyError("the URL's path has a '%' that starts no percent-encoding "
                                 "(write '%' itself as %25)", option)
    target = urllib.parse.quote(path, safe=PATH_SAFE)
    return target + "?" + urllib.parse.quote(query, safe=PATH_SAFE + "?") if query else target


def secret_values(endpoint: Endpoint, headers: Sequence) -> Tuple[str, ...]:
    """Return what must never be recorded or printed, longest first: every header value (the
    token of --token-env is one), the credential it carries and the URL's user and password.
    A value of fewer than MIN_SECRET_CHARS characters is left alone: it cannot be told from
    ordinary text (a `1` would hide every 1)."""
    values = {value for _, value in headers}
    if endpoint.authorization:
        import base64
        values.add(endpoint.authorization)
        user, _, password = base64.b64decode(endpoint.authorization.split()[1]).decode(
            "utf-8", "replace").partition(":")
        values |= {user, password}
    values |= {value.split(None, 1)[1] for value in list(values)
               if len(value.split(None, 1)) == 2}  # Bearer TOKEN: the token alone too
    # each in every form it can take in an answer or a record: JSON-escaped, percent-encoded
    forms = {form for value in values if len(value) >= MIN_SECRET_CHARS
             for form in secret_forms(value)}
    return tuple(sorted(forms, key=lambda v: (-len(v), v)))


def encode_request(endpoint: Endpoint, method: str, body: bytes, headers: Sequence) -> bytes:
    """Return the bytes of one HTTP/1.1 request, ready to send again and again."""
    host = bracketed(endpoint.host)
    default_port = 443 if endpoint.scheme == "https" else 80
    if endpoint.port != default_port:
        host += f":{endpoint.port}"
    lines = [f"{method} {endpoint.path} HTTP/1.1", f"Host: {host}",
             f"User-Agent: router-latency/{__version__}", "Accept: application/json"]
    if endpoint.authorization:
        lines.append(f"Authorization: {endpoint.authorization}")
    if method == "POST":
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace") + body


def whole_chunked(data: bytes, pos: int) -> Optional[bytes]:
    """Return the body of a chunked answer that lies whole in data from pos, its chunks in the
    plainest form: sizes of 1 to 8 hex digits without extensions, each chunk's data followed by
    CRLF, the last chunk without trailers, nothing after it. None for anything else, which the
    incremental parser then reads (and judges) from the start: one scan of the read, no copy
    of the body but its one slice."""
    end = data.find(b"\r\n", pos, pos + 10)
    line = data[pos:end]
    if end > pos and not line.strip(HEX_DIGITS):  # one chunk, then the last: Go's, at once
        stop = end + 2 + int(line, 16)
        if end + 2 < stop <= end + 2 + MAX_BODY_BYTES and data[stop:] == b"\r\n0\r\n\r\n":
            return data[end + 2:stop]
    pieces = []
    size = 1
    while size:
        end = data.find(b"\r\n", pos, pos + 10)
        line = data[pos:end]
        if end < 0 or not line or line.strip(HEX_DIGITS):
            return None
        size = int(line, 16)
        pos = end + 2 + size
        if data[pos:pos + 2] != b"\r\n":
            return None
        pieces.append(data[end + 2:pos])
        pos += 2
    if pos != len(data) or sum(map(len, pieces)) > MAX_BODY_BYTES:
        return None
    return pieces[0] if len(pieces) == 2 else b"".join(pieces)


class ResponseReader:
    """Incremental parser of one HTTP/1.x response: feed it bytes until it says complete.

    Shared by the blocking Connection and the event loop of a pass, so that both read every
    framing the same way: Content-Length, chunked, or to the close of the connection. Interim
    answers (100 Continue, 103 Early Hints: RFC 9110 section 15.2) are skipped; the response is
    the final one after them. The body is counted as it arrives and refused past MAX_BODY_BYTES
    whatever its framing. `keep_open` is False when the connection must not carry another
    request: the server said so, the body ran to the close, or bytes came beyond the response's
    end (one request at a time: no byte can belong to another, so the framing is in doubt).
    `headers` holds the final response's headers whose lowercase names were asked for.
    """

    __slots__ = ("status", "keep_open", "body", "headers", "received", "_buffer", "_wanted",
                 "_left", "_mode")

    def __init__(self, headers: Sequence[bytes] = ()) -> None:
        self.status: Optional[int] = None
        self.keep_open = True
        self.body: bytes | bytearray = bytearray()  # bytes: the whole answer came in one piece
        self.headers: dict = {}  # str name -> str value
        self.received = 0  # bytes of the answer so far, interim answers included
        self._buffer = bytearray()
        self._wanted = headers
        self._left = 0  # Content-Length: body bytes still to come; chunked: of this chunk
        self._mode = "head"  # head, length, close; chunked: size, data, crlf, trailer; done

    def feed(self, data: bytes) -> bool:
        """Take received bytes; return True once the response is complete."""
        self.received += len(data)
        if self._mode == "done":
            self.keep_open = False  # bytes after the end: the framing is in doubt
            return True
        buffer = self._buffer
        if self._mode == "head" and not buffer:  # the common case: a whole answer at once
            end = data.find(b"\r\n\r\n")
            if end >= 0:
                self._parse_known_head(data[:end])
                if self._mode == "length" and len(data) - end - 4 == self._left:
                    self.body, self._mode = data[end + 4:], "done"
                    return True
                if self._mode == "size":  # chunked, as Go sends a body over 2 KB
                    body = whole_chunked(data, end + 4)
                    if body is not None:
                        self.body, self._mode = body, "done"
                        return True
                data = data[end + 4:]
        buffer += data
        used = self._advance(buffer)
        if self._mode == "done":
            if used < len(buffer):
                self.keep_open = False
            buffer.clear()
            return True
        del buffer[:used]
        return False

    def eof(self) -> bool:
        """The server closed the connection; return True when that ends the response."""
        self.keep_open = False
        if self._mode == "close":
            self._mode = "done"
        if self._mode == "done":
            return True
        raise RequestFailed("reset", unanswered=not self.received)  # closed before the end

    def _advance(self, buffer: bytearray) -> int:
        """Parse the buffer from its start as far as it goes; return how many bytes it used."""
        pos = 0
        while self._mode != "done":
            mode = self._mode
            if mode == "head":
                end = buffer.find(b"\r\n\r\n", pos)
                if end >= 0:
                    self._parse_head(bytes(buffer[pos:end]))  # an interim answer: head again
                    pos = end + 4
                    continue
                bare = BARE_LF_HEAD_END.search(buffer, pos, pos + MAX_HEAD_BYTES + 3)
                if bare is None:
                    if len(buffer) - pos - 3 > MAX_HEAD_BYTES:  # the head would be longer
                        raise malformed(f"the response head is over {MAX_HEAD_BYTES:,} bytes")
                    return pos
                self._parse_head(BARE_LF.sub(b"\r\n", buffer[pos:bare.start()]))
                pos = bare.end()
            elif mode == "close":
                self._take(buffer, pos, len(buffer) - pos)
                return len(buffer)
            elif mode in ("length", "data"):
                count = min(self._left, len(buffer) - pos)
                self._take(buffer, pos, count)
                pos += count
                self._left -= count
                if self._left:
                    return pos
                self._mode = "done" if mode == "length" else "crlf"
            else:  # a line: a bare LF ends it too, as Go's client reads it (not after data)
                end = buffer.find(b"\n", pos)
                if end < 0:
                    if len(buffer) - pos - 1 > MAX_HEAD_BYTES:
                        raise malformed(f"a chunk size or trailer line is over "
                                        f"{MAX_HEAD_BYTES:,} bytes", self.status)
                    return pos
                crlf = end > pos and buffer[end - 1] == 13
                if mode == "crlf" and not crlf:
                    raise malformed("a chunk's data is not followed by CRLF", self.status)
                self._chunk_line(bytes(buffer[pos:end - crlf]))
                pos = end + 1
        return pos

    def _take(self, buffer: bytearray, pos: int, count: int) -> None:
        if len(self.body) + count > MAX_BODY_BYTES:
            raise RequestFailed("too_large", self.status)
        self.body += buffer[pos:pos + count]

    def _chunk_line(self, line: bytes) -> None:
        """Take a chunk's size line, the empty line after its data, or a trailer line."""
        if len(line) > MAX_HEAD_BYTES:
            raise malformed(f"a chunk size or trailer line is over {MAX_HEAD_BYTES:,} bytes",
                            self.status)
        if self._mode == "crlf":
            if line:
                raise malformed("a chunk's data is longer than its size", self.status)
            self._mode = "size"
        elif self._mode == "trailer":
            if not line:
                self._mode = "done"
        else:
            # hex digits only, then optional whitespace and ;extensions (RFC 9112 7.1): int()
            # would also take 0x41, 4_1, +41 or a leading space, which Go's client refuses
            digits = line.split(b";", 1)[0].rstrip(b" \t")
            if CHUNK_SIZE_PATTERN.fullmatch(digits) is None:
                raise malformed(f"chunk size {shown_bytes(digits)} is not 1 to 16 hex digits",
                                self.status)
            size = int(digits, 16)
            if len(self.body) + size > MAX_BODY_BYTES:  # refused before its bytes arrive
                raise RequestFailed("too_large", self.status)
            self._left, self._mode = size, ("data" if size else "trailer")

    HEADS: dict = {}  # (names asked for, a final head less values below) -> what it set
    HEAD_ENTRIES = 256
    # lines a server writes anew in every head, as Go's net/http and nginx spell them (the
    # router's X-Request-Id as Go writes it); _parse_head checks them only for their colon
    PER_ANSWER_LINES = ((b"\r\nDate: ", b"date"), (b"\r\nX-Request-Id: ", b"x-request-id"))

    def _parse_known_head(self, whole: bytes) -> None:
        """_parse_head, remembered for the heads of final answers: a server sends the same
        head every time but for the values of its PER_ANSWER_LINES (the first of each, left
        out of the key unless asked for): values without a line break, which no other line
        and no obs-fold reads."""
        if len(whole) > MAX_HEAD_BYTES:
            self._parse_head(whole)  # raises
            return
        head = whole
        for start, name in self.PER_ANSWER_LINES:
            at = head.find(start)
            if at >= 0 and name not in self._wanted:
                end = head.find(b"\r\n", at + 2)  # the line's value left out of the key
                head = head[:at + len(start)] + (head[end:] if end >= 0 else b"")
        key = (self._wanted, head)
        known = self.HEADS.get(key)
        if known is None:
            self._parse_head(whole)
            if self.status is None:
                return  # an interim answer: the final head follows
            if len(self.HEADS) >= self.HEAD_ENTRIES:
                self.HEADS.clear()
            known = self.HEADS[key] = (self.status, self.keep_open, self._mode, self._left,
                                       dict(self.headers))
        self.status, self.keep_open, self._mode, self._left, headers = known
        if headers:
            self.headers.update(headers)

    def _parse_head(self, head: bytes) -> None:
        if len(head) > MAX_HEAD_BYTES:  # the same limit however the head arrived
            raise malformed(f"the response head is over {MAX_HEAD_BYTES:,} bytes "
                            f"({len(head):,})")
        if OBS_FOLD.search(head) is not None:  # obs-fold: a client MUST unfold it
            head = OBS_FOLD.sub(b" ", head)
        lines = head.split(b"\r\n")
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise malformed(f"not an HTTP/1.x status line: {shown_bytes(lines[0])}")
        if len(parts[1]) != 3 or not parts[1].isdigit():  # as Go's client: three digits
            raise malformed(f"status code {shown_bytes(parts[1])} is not three digits")
        status = int(parts[1])
        if status == 101:
            raise RequestFailed("reset", status, "101 Switching Protocols")
        if status < 200:
            return  # interim: the final answer follows on the same connection
        self.status = status
        length = codings = None
        connection = b""
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:  # as Go's client: no field without a name and a colon
                raise malformed(f"a header line without a colon: {shown_bytes(line)}", status)
            name = name.strip().lower()
            if name == b"content-length":
                if length is not None and value.strip() != length:  # no way to tell the end
                    raise malformed("two different Content-Length values", status)
                length = value.strip()
            elif name == b"transfer-encoding":
                codings = (codings or b"") + b"," + value.lower()
            elif name == b"connection":
                connection += value.lower()
            elif name in self._wanted:
                self.headers[name.decode("latin-1")] = value.strip().decode("latin-1")
        self.keep_open = b"close" not in connection and (
            parts[0] == b"HTTP/1.1" or b"keep-alive" in connection)
        self._framing(status, length, codings)

    def _framing(self, status: int, length: Optional[bytes], codings: Optional[bytes]) -> None:
        """Choose how the body ends (RFC 9112 section 6.3)."""
        if status in (204, 304):
            self._mode = "done"
        elif codings is not None:
            chunked = codings.rsplit(b",", 1)[-1].strip() == b"chunked"
            self._mode = "size" if chunked else "close"
            if length is not None or not chunked:  # both framings, or to the close
                self.keep_open = False
        elif length is not None:
            # leading zeros are no digits of the length, as Go's client reads it
            if not length.isdigit() or (len(length) > MAX_LENGTH_DIGITS
                                        and len(length.lstrip(b"0")) > MAX_LENGTH_DIGITS):
                raise malformed(f"Content-Length {shown_bytes(length)} is not a length of at "
                                f"most {MAX_LENGTH_DIGITS} digits", status)
            self._left, self._mode = int(length), "length"
            if self._left > MAX_BODY_BYTES:
                raise RequestFailed("too_large", status)
        else:
            self._mode, self.keep_open = "close", False


NOT_TLS = "the server did not speak TLS (a plain-HTTP port? http:// reaches it)"
NOT_TLS_REASONS = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
                   "HTTP_REQUEST", "UNKNOWN_PROTOCOL")


def tls_context(endpoint: Endpoint, *, insecure: bool = False) -> Optional[ssl.SSLContext]:
    """Return a TLS context verifying certificates (unless insecure); None for plain http."""
    if endpoint.scheme != "https":
        return None
    import ssl
    context = ssl.create_default_context()
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def blocked_errors(context: Optional[ssl.SSLContext], *,
                   writing: bool = False) -> Tuple[Type[OSError], ...]:
    """Return what a non-blocking socket raises when it has nothing to read yet (writing: no
    room to write): BlockingIOError, and on a socket of a TLS context also ssl's own (ssl is
    imported only where a context is made: only https needs it)."""
    if context is None:
        return (BlockingIOError,)
    import ssl
    if writing:
        return (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError)
    return (BlockingIOError, ssl.SSLWantReadError)


def wait_socket(sock: socket.socket, writable: bool, deadline: float,
                stop: Optional[threading.Event]) -> None:
    """Wait until sock can be written (or read); raise RequestFailed 'timeout' at the
    deadline (time.monotonic) and 'interrupted' once stop is set, looked at every STOP_POLL_S."""
    poller = select.poll()
    poller.register(sock, select.POLLOUT if writable else select.POLLIN)
    while True:
        if stop is not None and stop.is_set():
            raise RequestFailed("interrupted")
        left = deadline - time.monotonic()
        if left <= 0:
            raise RequestFailed("timeout")
        if poller.poll(math.ceil(min(left, STOP_POLL_S) * 1000)):
            return


def connect_socket(endpoint: Endpoint, deadline: float,
                   stop: Optional[threading.Event]) -> socket.socket:
    """Return a non-blocking socket connected to the endpoint; raise RequestFailed."""
    import socket
    try:
        addresses = socket.getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)
    except OSError:
        raise RequestFailed("connect") from None
    for family, kind, proto, _, address in addresses:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            code = sock.connect_ex(address)
            if code in (errno.EINPROGRESS, errno.EAGAIN):
                wait_socket(sock, True, deadline, stop)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        except RequestFailed:
            sock.close()
            raise
        except OSError:
            code = -1
        if code == 0:
            return sock
        sock.close()
    raise RequestFailed("connect")


def tls_handshake(sock: ssl.SSLSocket, deadline: float,
                  stop: Optional[threading.Event]) -> None:
    """Complete the TLS handshake of a non-blocking socket; raise RequestFailed."""
    import ssl
    while True:
        try:
            sock.do_handshake()
            return
        except ssl.SSLWantReadError:
            writable = False
        except ssl.SSLWantWriteError:
            writable = True
        except ssl.SSLCertVerificationError as exc:
            raise RequestFailed("tls", detail=f"{exc.verify_message or exc.reason} (--insecure "
                                              f"skips the certificate check)") from None
        except ssl.SSLError as exc:
            raise RequestFailed("tls", detail=NOT_TLS if exc.reason in NOT_TLS_REASONS
                                else exc.reason or str(exc)) from None
        except OSError:
            raise RequestFailed("tls", detail="the server closed the connection during the "
                                              "TLS handshake: does it speak TLS?") from None
        try:
            wait_socket(sock, writable, deadline, stop)
        except RequestFailed as failure:
            if failure.kind == "timeout":  # a TLS server answers a hello at once
                raise RequestFailed("timeout", detail=f"no answer to the TLS handshake in time: "
                                                      f"{NOT_TLS}") from None
            raise


def open_socket(endpoint: Endpoint, timeout: float, ssl_context: Optional[ssl.SSLContext],
                stop: Optional[threading.Event] = None) -> socket.socket:
    """Return a connected non-blocking socket (TLS-wrapped and past the handshake for https);
    raise RequestFailed. Its waits look at `stop` every STOP_POLL_S and end when it is set."""
    import socket
    deadline = time.monotonic() + timeout
    sock = connect_socket(endpoint, deadline, stop)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(sock, server_hostname=endpoint.host,
                                           do_handshake_on_connect=False)
            tls_handshake(sock, deadline, stop)
    except RequestFailed:
        sock.close()
        raise
    except OSError:
        sock.close()
        raise RequestFailed("connect") from None
    return sock


class Reply(NamedTuple):
    """A whole answer to one request of a Connection."""
    status: int
    body: bytes


class Connection:
    """One persistent blocking HTTP/1.1 connection, reopened after an error or a close.

    A request written to the reused connection that ends before any byte of its answer came
    (the server closed it while idle) is sent once more on a new connection, as Go's Transport
    and urllib3 do. Every wait looks at `stop` every STOP_POLL_S and ends when it is set.
    """

    def __init__(self, endpoint: Endpoint, timeout: float,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 stop: Optional[threading.Event] = None):
        self.endpoint = endpoint
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.no_data = blocked_errors(ssl_context)  # a non-blocking read found nothing yet
        self.stop = stop
        self.sock: Optional[socket.socket] = None

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None

    def exchange(self, payload: bytes) -> Reply:
        """Return the Reply (status, body) of one request; raise RequestFailed with its kind."""
        if self.sock is not None and self._stale(self.sock):
            self.close()
        reused = self.sock is not None
        try:
            reader = self._exchange(payload)
        except RequestFailed as failure:
            if not (reused and failure.kind == "reset" and failure.unanswered):
                raise
            reader = self._exchange(payload)
        if not reader.keep_open:
            self.close()
        # complete: its status line was read
        return Reply(cast(int, reader.status), bytes(reader.body))

    def _stale(self, sock: socket.socket) -> bool:
        """Return True when the idle connection was closed or holds bytes nobody asked for."""
        try:
            sock.setblocking(False)
            sock.recv(1)
        except self.no_data:
            return False  # nothing there (a TLS session ticket is not application data)
        except OSError:
            pass
        return True

    def _exchange(self, payload: bytes) -> ResponseReader:
        import socket
        if self.sock is None:
            self.sock = open_socket(self.endpoint, min(self.timeout, CONNECT_TIMEOUT_S),
                                    self.ssl_context, self.stop)
        deadline = time.monotonic() + self.timeout
        reader = ResponseReader()
        try:
            # the deadline and the stop flag are looked at before every send and recv, each
            # of which waits at most STOP_POLL_S: a peer dripping a byte every 50 ms never let
            # a recv time out, so neither was ever looked at (still running at 40 s of a 2 s
            # --timeout, SIGTERM unheard)
            view = memoryview(payload)
            while view:
                self.sock.settimeout(self._waited(deadline))
                try:
                    view = view[self.sock.send(view):]
                except socket.timeout:  # the server reads no more of it: has it answered?
                    if self._answered_early(reader):
                        reader.keep_open = False  # the rest would be read as a request
                        return reader
            while True:
                self.sock.settimeout(self._waited(deadline))
                try:
                    data = self.sock.recv(262144)
                except socket.timeout:
                    continue
                if reader.feed(data) if data else reader.eof():
                    return reader
        except RequestFailed as failure:
            self.close()
            if failure.kind == "timeout" and not reader.received:
                failure.unanswered = True  # no byte of an answer came (ask_router tells)
            raise
        except (OSError, ValueError):
            self.close()
            raise RequestFailed("reset", unanswered=not reader.received) from None
        except Exception as exc:  # noqa: BLE001 - an answer nothing above foresaw
            self.close()
            raise malformed(f"{type(exc).__name__}: {exc}", reader.status) from None

    def _answered_early(self, reader: ResponseReader) -> bool:
        """Read what the server sent while the request was still being written (it stopped
        reading it: a body too large, say); return whether that is a whole answer. Go's
        client takes such an answer and closes the connection, as exchange does then."""
        sock = cast("socket.socket", self.sock)
        sock.settimeout(0.0)
        try:
            while True:
                try:
                    data = sock.recv(262144)
                except self.no_data:
                    return False
                if reader.feed(data) if data else reader.eof():
                    return True
        finally:
            sock.settimeout(STOP_POLL_S)  # set again before the next send or recv

    def _waited(self, deadline: float) -> float:
        """Raise when the request is out of time or stopped; else return how long the next
        send or recv may wait: STOP_POLL_S at most, and never past the deadline."""
        if self.stop is not None and self.stop.is_set():
            raise RequestFailed("interrupted")
        left = deadline - time.monotonic()
        if left <= 0:
            raise RequestFailed("timeout")
        return min(left, STOP_POLL_S)


def accept_connections(listener: socket.socket, serve: Callable[[socket.socket], None],
                       stopping: threading.Event) -> None:
    """Accept connections until the listener closes; each gets TCP_NODELAY and serve()."""
    import socket
    while not stopping.is_set():
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        serve(connection)


def stop_accepting(listeners: Sequence[socket.socket],
                   threads: Sequence[threading.Thread]) -> None:
    """Shut the listeners down, wait for the threads that accept on them, then close them. A
    listener closed under a thread blocked in accept() keeps listening on Linux (the call
    holds it), and a descriptor number freed while a thread is between two calls on it is the
    next socket's: that thread would take another server's connections."""
    import socket
    for listener in listeners:
        try:
            listener.shutdown(socket.SHUT_RDWR)  # wakes accept() with an error
        except OSError:
            pass
    for thread in threads:
        thread.join(5)
    for listener in listeners:
        listener.close()


def http_response(status: int, body: bytes, content_type: str = "application/json",
                  headers: Sequence = ()) -> bytes:
    """Return a whole HTTP/1.1 response with a Content-Length, head and body in one buffer."""
    import http
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers)
    return (f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
            f"Content-Type: {content_type}\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
            ).encode("latin-1") + body
