"""A webhook receiver for tests/webhooks_out.rs: verifies every delivery with the
`standardwebhooks` package (the Standard Webhooks reference library) and records it.

Started by the Rust test as `python receiver.py SECRET...` (one or more whsec_ secrets, any of
which may verify); prints `port N` once listening. Besides the endpoint it serves:

  POST /_control  {"fail": N, "status": 503, "retryAfter": "1", "hang": N, "delayMs": N,
                   "secrets": [...]}
      the next N deliveries answer `status` (with Retry-After when given); the next `hang`
      deliveries get no answer until the receiver is told to let go (`release`); every
      answer waits delayMs first; `secrets` replaces the secrets it verifies with.
  POST /_release  lets hanging deliveries go (closed without an answer).
  GET  /_log      every delivery received, in order: id, timestamp, type, verified, error,
                  answered (the status sent, or null), at (monotonic seconds).
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

state = {
    "secrets": sys.argv[1:],
    "fail": 0,
    "status": 503,
    "retryAfter": None,
    "hang": 0,
    "delayMs": 0,
    "log": [],
}
lock = threading.Lock()
release = threading.Event()


def verify(body: bytes, headers) -> (bool, str):
    wanted = {k: headers.get(k) for k in ("webhook-id", "webhook-timestamp", "webhook-signature")}
    if any(v is None for v in wanted.values()):
        return False, "missing headers"
    errors = []
    for secret in state["secrets"]:
        try:
            Webhook(secret).verify(body, wanted)
            return True, ""
        except WebhookVerificationError as e:
            errors.append(str(e))
    return False, "; ".join(errors) or "no secret"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n)

    def do_GET(self):
        if self.path == "/_log":
            with lock:
                out = json.dumps(state["log"]).encode()
            self.reply(200, out, [("Content-Type", "application/json")])
        else:
            self.reply(404)

    def do_POST(self):
        body = self.body()
        if self.path == "/_control":
            with lock:
                state.update(json.loads(body))
            if state.get("hang", 0) > 0:
                release.clear()
            self.reply(200, b"{}")
            return
        if self.path == "/_release":
            release.set()
            self.reply(200, b"{}")
            return
        ok, error = verify(body, self.headers)
        try:
            kind = json.loads(body).get("type")
        except ValueError:
            kind = None
        entry = {
            "id": self.headers.get("webhook-id"),
            "timestamp": self.headers.get("webhook-timestamp"),
            "signatures": (self.headers.get("webhook-signature") or "").count("v1,"),
            "type": kind,
            "body": body.decode("utf-8", "replace"),
            "verified": ok,
            "error": error,
            "answered": None,
            "at": time.monotonic(),
            "path": self.path,
        }
        with lock:
            state["log"].append(entry)
            hang = state["hang"] > 0
            if hang:
                state["hang"] -= 1
            fail = not hang and state["fail"] > 0
            if fail:
                state["fail"] -= 1
            delay = state["delayMs"]
        if hang:
            release.wait()
            self.close_connection = True
            return
        if delay:
            time.sleep(delay / 1000)
        if not ok:
            status, headers = 400, []
        elif fail:
            status = state["status"]
            headers = [("Retry-After", state["retryAfter"])] if state["retryAfter"] else []
        else:
            status, headers = 204, []
        with lock:
            entry["answered"] = status
        self.reply(status, b"" if status == 204 else b'{"error":"try later"}', headers)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(f"port {server.server_address[1]}", flush=True)
server.serve_forever()
