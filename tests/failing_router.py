"""A loopback router that is up and fails: /ready answers 200, every preview 500
CLASSIFICATION_ERROR (the router's envelope). Writes its URL to the file named by its one
argument once it listens, and serves until it is ended."""

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BODY = b'{"error":{"code":"CLASSIFICATION_ERROR","message":"classification failed"}}'


class Failing(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # as Go's net/http: no head-and-body stall (the body of each answer waited for the
    # client's delayed ACK of its head, some 50 ms of a run's 8 answers and readiness)
    disable_nagle_algorithm = True

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer(500, BODY)

    def do_GET(self):
        self.answer(200, b'{"status":"ready","ready":true}')

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    Path(sys.argv[1] + ".tmp").write_text(url + "\n")
    Path(sys.argv[1] + ".tmp").rename(sys.argv[1])
    server.serve_forever()
