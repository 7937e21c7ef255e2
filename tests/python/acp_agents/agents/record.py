"""What the test agents were called with, appended as JSON lines to the file `AGENT_RECORD` names,
so a test can wait for a call to reach the agent and see what it carried."""

import json
import os


def record(method, **fields):
    path = os.environ.get("AGENT_RECORD")
    if not path:
        return
    line = json.dumps({"method": method, **fields})
    with open(path, "a") as f:
        f.write(line + "\n")


def watch_keys(app):
    """Records, for every JSON-RPC call, whether it carried the key this agent was issued."""

    @app.middleware("http")
    async def key_check(request, call_next):
        if request.url.path == "/api":
            sent = request.headers.get("x-agent-api-key")
            record(
                "http",
                key_matches=sent is not None and sent == os.environ.get("AGENT_API_KEY"),
                request_id=request.headers.get("x-request-id"),
            )
        return await call_next(request)
