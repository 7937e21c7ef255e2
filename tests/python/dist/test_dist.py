"""The files that ship sessiond without a Rust toolchain: the release workflow, the container
image definition and the systemd unit. Nothing here runs GitHub Actions or a Docker engine (neither
exists on this machine): the workflow is parsed and checked for what it must do, the Dockerfile's
instructions are checked, and the unit is verified by `systemd-analyze verify` against the real
binary."""

import os
import shutil
import subprocess
import tempfile
import tomllib

import pytest
import yaml

ROOT = os.getcwd()
BIN = os.environ.get("SESSIOND_BIN", "")
TARGETS = {
    "x86_64-unknown-linux-musl",
    "aarch64-unknown-linux-musl",
    "aarch64-apple-darwin",
    "x86_64-apple-darwin",
}


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def workflow():
    return yaml.safe_load(read(".github/workflows/release.yml"))


def test_the_release_workflow_runs_on_version_tags_only():
    wf = workflow()
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` as true
    assert list(on) == ["push"], on
    assert on["push"] == {"tags": ["v*"]}
    assert wf["permissions"] == {"contents": "read"}


def test_the_release_workflow_builds_every_target_with_the_dist_profile():
    build = workflow()["jobs"]["build"]
    targets = {entry["target"] for entry in build["strategy"]["matrix"]["include"]}
    assert targets == TARGETS
    runs = [step.get("run", "") for step in build["steps"]]
    assert any("cargo build --locked --profile dist --target ${{ matrix.target }}" in r for r in runs), runs
    profile = tomllib.loads(read("Cargo.toml"))["profile"]
    assert profile["dist"]["inherits"] == "release"
    package = next(r for r in runs if "tar -C pkg" in r)
    assert "target/${{ matrix.target }}/dist/sessiond" in package
    assert "shasum -a 256" in package


def test_the_release_job_attaches_archives_and_checksums():
    release = workflow()["jobs"]["release"]
    assert release["needs"] == "build"
    assert release["permissions"] == {"contents": "write"}
    runs = "\n".join(step.get("run", "") for step in release["steps"])
    assert "SHA256SUMS" in runs and "sha256sum --check SHA256SUMS" in runs
    assert "gh release upload" in runs and "sessiond-*.tar.gz SHA256SUMS" in runs


def dockerfile():
    """(instruction, argument) pairs, continuation lines joined and comments dropped."""
    out, current = [], ""
    for line in read("Dockerfile").splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            word, _, rest = current.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            current = ""
    return out


def test_the_image_builds_locked_and_runs_unprivileged_with_a_data_volume():
    steps = dockerfile()
    froms = [arg for ins, arg in steps if ins == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS build"), froms
    # The build stage's Rust is the project's rust-version; runtime and build share a Debian.
    manifest = tomllib.loads(read("Cargo.toml"))
    rust_version = manifest["workspace"]["package"]["rust-version"]
    assert froms[0].startswith(f"rust:{rust_version}-slim-"), froms[0]
    assert froms[1] == "debian:" + froms[0].split("-slim-")[1].split()[0] + "-slim"
    runs = [arg for ins, arg in steps if ins == "RUN"]
    assert any("cargo build --locked --release" in r for r in runs)
    assert any("ca-certificates" in r for r in runs)
    assert ("USER", "sessiond") in steps
    assert ("VOLUME", "/data") in steps
    env = next(arg for ins, arg in steps if ins == "ENV")
    assert "SESSIOND_DATA_DIR=/data" in env and "SESSIOND_BIND=0.0.0.0:8080" in env
    assert ("ENTRYPOINT", '["sessiond"]') in steps and ("CMD", '["serve"]') in steps
    ignored = read(".dockerignore").split()
    assert "target/" in ignored and "sessiond-data/" in ignored


def test_the_systemd_unit_verifies():
    tool = shutil.which("systemd-analyze")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze is needed to verify dist/sessiond.service")
        pytest.skip("systemd-analyze not found")
    assert BIN, "SESSIOND_BIN is not set"
    unit = read("dist/sessiond.service")
    assert "ExecStart=/usr/local/bin/sessiond serve\n" in unit
    assert "StateDirectory=sessiond\n" in unit and "Environment=SESSIOND_DATA_DIR=/var/lib/sessiond\n" in unit
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sessiond.service")
        with open(path, "w") as f:
            # verify checks that the program exists: point it at the binary under test.
            f.write(unit.replace("/usr/local/bin/sessiond", BIN))
        out = subprocess.run([tool, "verify", path], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == "", out.stderr
