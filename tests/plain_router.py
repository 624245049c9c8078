"""A loopback router as plain as `run` can measure: GET /ready and /health answer 200 at once,
every POST a preview answer of one decision after a fixed delay, on connections kept alive, a
thread each; any other GET a 404. For the tests of rounds/run_rounds.sh whose claim is the
script's (its ports, sessions, stops, interrupts, looks, budget, pools), not the router's:
run as `python -S`, with nothing but socket and threading, it starts on about a sixth of the
CPU of the tool's `simulate` (which the README's workflow, the tests named ..._with_simulate
and those that need its configuration hash or start-up keep), some 80 starts a session.

    python -S plain_router.py URL_FILE [--port N] [--delay-ms MS] [--decision NAME]

Writes its URL to URL_FILE once it listens (whole: a temporary file renamed), and serves
until it is ended (SIGTERM's default action). A bad option: a line on stderr, exit 2."""

import os
import socket
import sys
import threading
import time


def answer(status, body):
    return (b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status, len(body), body))


NOT_FOUND = answer(b"404 Not Found", b'{"error": "not found"}')
READY = answer(b"200 OK", b'{"status": "ready", "ready": true}')


def serve(connection, delay_s, preview):
    """Answer the requests of one connection until the client closes it."""
    with connection, connection.makefile("rb") as reader:
        while True:
            line = reader.readline(65537)
            if not line:
                return
            length = 0
            while True:
                header = reader.readline(65537)
                if header in (b"\r\n", b"\n", b""):
                    break
                name, _, value = header.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length:
                reader.read(length)
            if line.startswith(b"POST "):
                time.sleep(delay_s)
                connection.sendall(preview)
            else:
                path = (line.split() + [b"", b""])[1]
                connection.sendall(READY if path in (b"/ready", b"/health") else NOT_FOUND)


def options(argv):
    """(URL file, port, delay in seconds, decision) of the command line; exit 2 if wrong."""
    given = {"--port": "0", "--delay-ms": "0", "--decision": "plain"}
    if not argv or argv[0].startswith("-") or len(argv) % 2 == 0 \
            or any(name not in given for name in argv[1::2]):
        print(f"usage: plain_router.py URL_FILE [{'] ['.join(f'{o} X' for o in given)}]",
              file=sys.stderr)
        sys.exit(2)
    given.update(zip(argv[1::2], argv[2::2]))
    try:
        return argv[0], int(given["--port"]), float(given["--delay-ms"]) / 1000, \
            given["--decision"]
    except ValueError as error:
        print(f"plain_router.py: {error}", file=sys.stderr)
        sys.exit(2)


def main():
    url_file, port, delay_s, decision = options(sys.argv[1:])
    preview = answer(b"200 OK", b'{"decision_result": {"decision_name": "%s"}}'
                     % decision.encode())
    listener = socket.create_server(("127.0.0.1", port))
    with open(f"{url_file}.tmp", "w") as written:
        written.write(f"http://127.0.0.1:{listener.getsockname()[1]}\n")
    os.replace(f"{url_file}.tmp", url_file)
    while True:
        connection, _ = listener.accept()
        threading.Thread(target=serve, args=(connection, delay_s, preview), daemon=True).start()


if __name__ == "__main__":
    main()
