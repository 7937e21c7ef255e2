"""The real sessiond binary for the Python suites (run by tests/python.rs).

`Server()` bootstraps an owner and an API key with the CLI in a fresh temporary data dir, then
serves on an ephemeral loopback port with the plain scripted engine, like the Rust tests'
`tests/common/mod.rs`. It can be stopped (SIGTERM), killed (SIGKILL) and restarted on the same data
dir, which is what restart tests need.

With `SESSIOND_TEST_BACKEND=postgres` (the PostgreSQL pass) each server gets a PostgreSQL database
of its own, made with `createdb` in the cluster tests/python.rs runs (`SESSIOND_TEST_PG_*`), and it
and every CLI command on its data dir are given `--database URL`; the database is dropped by
`close()`. Unset, the store is SQLite in the data dir; any other value is an error.
"""

import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse

BIN = os.environ.get("SESSIOND_BIN", "")
OWNER_EMAIL = "owner@test.local"
OWNER_PASSWORD = "test-password-123"
WORKSPACE = "default"

# What every test server starts with: the scripted engine and none of the outer OpenAI variables
# or database URL.
BASE_ENV = {"SESSIOND_ENGINE": "scripted", "SESSIOND_LOG": "warn"}
DROPPED_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "SESSIOND_DATABASE_URL")

BACKEND = os.environ.get("SESSIOND_TEST_BACKEND")
if BACKEND not in (None, "postgres"):
    raise RuntimeError(
        f"SESSIOND_TEST_BACKEND={BACKEND!r}: the tests run on SQLite with the variable unset, "
        "on PostgreSQL with SESSIOND_TEST_BACKEND=postgres"
    )


class Database:
    """A PostgreSQL database of its own in the test cluster (the PostgreSQL pass)."""

    _next = itertools.count(1)

    def __init__(self):
        try:
            self._bin = os.environ["SESSIOND_TEST_PG_BIN"]
            self._host = os.environ["SESSIOND_TEST_PG_HOST"]
            self._port = os.environ["SESSIOND_TEST_PG_PORT"]
            self._user = os.environ["SESSIOND_TEST_PG_USER"]
        except KeyError as e:
            raise RuntimeError(
                f"SESSIOND_TEST_BACKEND=postgres without {e.args[0]}: run the suites through "
                "`cargo test --test python`, which starts the PostgreSQL cluster"
            ) from None
        self.name = f"py{os.getpid()}_{next(self._next)}"
        self._run("createdb", self.name)
        host = urllib.parse.quote(self._host, safe="")
        self.url = f"postgresql://{self._user}@{host}:{self._port}/{self.name}"

    def _run(self, program, *args):
        out = subprocess.run(
            [os.path.join(self._bin, program), "-h", self._host, "-p", self._port, "-U", self._user, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed: {out.stderr.strip()}")

    def drop(self):
        self._run("dropdb", "--force", "--if-exists", self.name)


def _child_env(**overrides):
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env.update(overrides)
    return env


def _cli(data_dir, args, stdin=None, database=None):
    env = _child_env(SESSIOND_LOG="warn")
    db_args = ["--database", database.url] if database else []
    out = subprocess.run(
        [BIN, *args, "--data-dir", data_dir, *db_args],
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
        self.database = Database() if BACKEND == "postgres" else None
        # The CLI works on an existing data dir only (`serve` is the one command that creates it).
        os.makedirs(self.data_dir)
        self.cli("user", "create", "--email", OWNER_EMAIL, "--password-stdin", stdin=OWNER_PASSWORD + "\n")
        self.key = self.token(["sessions", "files:write"], name="tests")
        self.start()

    def cli(self, *args, stdin=None):
        """Runs a CLI subcommand on this server's data dir (and database); returns its stdout."""
        return _cli(self.data_dir, list(args), stdin=stdin, database=self.database)

    def token(self, scopes, name="py"):
        """A new API key of the owner with these scopes."""
        args = ["token", "create", "--user", OWNER_EMAIL, "--name", name]
        for s in scopes:
            args += ["--scope", s]
        return self.cli(*args)

    def start(self):
        assert self.proc is None, "already running"
        env = _child_env(**BASE_ENV)
        env.update(self.env)
        db_args = ["--database", self.database.url] if self.database else []
        self.proc = subprocess.Popen(
            [BIN, "serve", "--bind", "127.0.0.1:0", "--metrics-bind", "127.0.0.1:0",
             "--data-dir", self.data_dir, *db_args, *self.args],
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
        if self.database is not None:
            database, self.database = self.database, None
            database.drop()


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
