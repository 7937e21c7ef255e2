"""The real sessiond binary for the Python suites (run by tests/python.rs).

`Server()` bootstraps an owner and an API key with the CLI in a fresh temporary data dir, then
serves on an ephemeral loopback port with the plain scripted engine, like the Rust tests'
`tests/common/mod.rs`. It can be stopped (SIGTERM), killed (SIGKILL) and restarted on the same data
dir, which is what restart tests need.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

BIN = os.environ.get("SESSIOND_BIN", "")
OWNER_EMAIL = "owner@test.local"
OWNER_PASSWORD = "test-password-123"
WORKSPACE = "default"

# What every test server starts with: the scripted engine and none of the outer OpenAI variables.
BASE_ENV = {"SESSIOND_ENGINE": "scripted", "SESSIOND_LOG": "warn"}
DROPPED_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL")


def _cli(data_dir, args, stdin=None):
    env = dict(os.environ, SESSIOND_LOG="warn")
    out = subprocess.run(
        [BIN, *args, "--data-dir", data_dir],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if out.returncode != 0:
        raise RuntimeError(f"sessiond {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout.strip()


class Server:
    """A sessiond process on 127.0.0.1 with a temporary data dir."""

    def __init__(self, env=None, config=None, args=()):
        if not BIN:
            raise RuntimeError("SESSIOND_BIN is not set: run the suites through `cargo test --test python`")
        self._tmp = tempfile.mkdtemp(prefix="sessiond-py-")
        self.data_dir = os.path.join(self._tmp, "data")
        self.args = list(args)
        if config is not None:
            path = os.path.join(self._tmp, "sessiond.toml")
            with open(path, "w") as f:
                f.write(config)
            self.args += ["--config", path]
        self.env = dict(env or {})
        self.proc = None
        self.base = None
        self.metrics_url = None
        # The CLI works on an existing data dir only (`serve` is the one command that creates it).
        os.makedirs(self.data_dir)
        _cli(self.data_dir, ["user", "create", "--email", OWNER_EMAIL, "--password-stdin"], stdin=OWNER_PASSWORD + "\n")
        self.key = self.token(["sessions", "files:write"], name="tests")
        self.start()

    def cli(self, *args, stdin=None):
        """Runs a CLI subcommand on this server's data dir; returns its stdout."""
        return _cli(self.data_dir, list(args), stdin=stdin)

    def token(self, scopes, name="py"):
        """A new API key of the owner with these scopes."""
        args = ["token", "create", "--user", OWNER_EMAIL, "--name", name]
        for s in scopes:
            args += ["--scope", s]
        return self.cli(*args)

    def start(self):
        assert self.proc is None, "already running"
        env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
        env.update(BASE_ENV)
        env.update(self.env)
        self.proc = subprocess.Popen(
            [BIN, "serve", "--bind", "127.0.0.1:0", "--metrics-bind", "127.0.0.1:0",
             "--data-dir", self.data_dir, *self.args],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        prefix = "sessiond listening on "
        while True:
            line = self.proc.stdout.readline().strip()
            if line.startswith("sessiond metrics on "):
                self.metrics_url = line[len("sessiond metrics on "):]
                continue
            break
        if not line.startswith(prefix):
            self.kill()
            raise RuntimeError(f"unexpected start-up line from sessiond: {line!r}")
        self.base = line[len(prefix):]
        # Keep draining stdout so the server never blocks on a full pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def stop(self, timeout=30):
        """SIGTERM and wait for a clean exit; returns the exit code."""
        proc, self.proc = self.proc, None
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=timeout)

    def kill(self):
        """SIGKILL, as a crash."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait()

    def restart(self):
        if self.proc is not None:
            self.stop()
        self.start()

    def url(self, path):
        return self.base + path

    def close(self):
        self.kill()
        shutil.rmtree(self._tmp, ignore_errors=True)


def wait_for(predicate, timeout=30.0, interval=0.02, what="condition"):
    """Polls `predicate` until it returns a truthy value (returned) or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
