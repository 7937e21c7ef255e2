"""Schema fuzzing: schemathesis drives every operation of the server's own OpenAPI document
(GET /openapi.json) with generated valid and invalid requests, following the document's links
between operations, and checks every answer against the document: no server error, no status,
content type or body the document does not describe. Bounded in time.

The event streams (`GET …/agent/sessions/{sessionId}/events`, `GET /v2/sessions/{sessionId}/events/stream`
and `GET /agentex/tasks/…/stream`) are included: the document describes each event of a stream
(its `event`, `id` and the JSON of its `data`), and schemathesis reads a stream until it has a few
events or a short timeout passes (streams do not end by themselves), then checks every event it
read against that description.
"""

import json
import os
import subprocess
import sys
import urllib.request

from openapi_spec_validator import validate

from sessiond_server import Server

# Seconds of fuzzing (the whole run stays within a couple of minutes).
BUDGET = int(os.environ.get("SESSIOND_FUZZ_SECONDS", "75"))

CONFIG = """
[runner]
wait_deadline_ms = 1000
[limits]
body_timeout_ms = 5000
[stream]
keepalive_ms = 500
"""


def fetch(server, path):
    with urllib.request.urlopen(server.url(path), timeout=30) as res:
        return json.loads(res.read())


def test_the_document_is_valid_openapi_3_1():
    server = Server(config=CONFIG)
    try:
        doc = fetch(server, "/openapi.json")
        assert doc["openapi"].startswith("3.1")
        validate(doc)
    finally:
        server.close()


def test_schemathesis_finds_no_server_error_and_no_answer_outside_the_document(tmp_path):
    server = Server(config=CONFIG)
    try:
        # Real identifiers for the path parameters, so that operations reach their handlers and
        # not only their 404s (the fuzzer still varies bodies and queries).
        req = urllib.request.Request(
            server.url("/v1/ws/default/agent/sessions"),
            data=json.dumps({"prompt": "hello"}).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as res:
            session = json.loads(res.read())["session"]["sessionId"]
        req = urllib.request.Request(
            server.url("/v1/ws/default/agents"),
            headers={"Authorization": f"Bearer {server.key}"},
        )
        with urllib.request.urlopen(req, timeout=30) as res:
            agents = json.loads(res.read())["agents"]
        root_id = next(a["id"] for a in agents if a["slug"] == "root")
        config = tmp_path / "schemathesis.toml"
        config.write_text(
            # A stream is read until it has sent this many events, or for its operation's timeout.
            "max-stream-events = 4\n"
            "[parameters]\n"
            'workspaceSlug = "default"\n'
            f'sessionId = "{session}"\n'
            'agentSlug = "root"\n'
            f'agent_id = "{root_id}"\n'
            'agent_name = "root"\n'
            f'task_id = "{session}"\n'
            "[[operations]]\n"
            'include-path-regex = "/events$|/events/stream$|/stream$"\n'
            "request-timeout = 3\n"
        )
        # The seed's event union is deeply nested: give the generator room (Python 3.11's parser
        # otherwise trips over its own recursion limit while describing strategies).
        runner = (
            "import sys; sys.setrecursionlimit(20000); "
            "from schemathesis.cli import schemathesis; sys.exit(schemathesis())"
        )
        cmd = [
            sys.executable, "-c", runner, "--config-file", str(config),
            "run", server.url("/openapi.json"),
            "--url", server.base,
            "-H", f"Authorization: Bearer {server.key}",
            "--checks", ",".join([
                "not_a_server_error",
                "status_code_conformance",
                "content_type_conformance",
                "response_schema_conformance",
            ]),
            "--phases", "examples,coverage,fuzzing,stateful",
            "--max-time", str(BUDGET),
            "--max-examples", "40",
            "--request-timeout", "20",
            "--workers", "2",
            "--seed", "20261201",
            "--generation-database", "none",
            "--no-color",
            "--report", "junit",
            "--report-dir", str(tmp_path),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=BUDGET + 180)
        print(out.stdout[-20000:])
        print(out.stderr[-5000:])
        assert out.returncode == 0, "schemathesis found failures (see above)"
        # The server survived it and still answers.
        assert fetch(server, "/healthz")["status"] == "ok"
    finally:
        server.close()
