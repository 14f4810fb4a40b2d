"""The server the e2b SDK's tests drive: the worktree's built
``tinyrun-sandbox-api`` with ``--e2b`` on a private --root, socket and
loopback TCP port, with two API keys (two clients), started once per run.
The SDK is pointed at it through its own environment variables only:
E2B_API_URL and E2B_SANDBOX_URL (this server) and E2B_API_KEY (the first
key). At the end the server is stopped (which ends every box it made) and
the run fails if a box, a mount or a process of the server is left.

Needs root (the sandbox makes namespaces and cgroups) and the pinned SDK
(``conformance/install-deps`` puts it in target/e2b-venv; run the tests
with that venv's python). Without either they are skipped, unless
``TINYRUN_REQUIRE_ROOT=1`` (CI), where they fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _target() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")


def _missing(why: str) -> None:
    if os.environ.get("TINYRUN_REQUIRE_ROOT") == "1":
        pytest.fail(f"{why}, and TINYRUN_REQUIRE_ROOT=1", pytrace=False)
    pytest.skip(why)


@dataclass
class Server:
    url: str
    keys: tuple[str, str]
    root: str
    log: Path
    proc: subprocess.Popen[bytes]

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(srv: Server) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if srv.proc.poll() is not None:
            pytest.fail(f"the server exited {srv.proc.returncode} at start:\n{srv.log_tail()}", pytrace=False)
        try:
            req = urllib.request.Request(srv.url + "/v1/health", headers={"Authorization": f"Bearer {srv.keys[0]}"})
            with urllib.request.urlopen(req, timeout=2) as r:
                if json.load(r).get("status") == "ok":
                    return
        except OSError:
            pass
        time.sleep(0.05)
    pytest.fail(f"the server did not answer within 30 s:\n{srv.log_tail()}", pytrace=False)


def _stop(srv: Server, work: str) -> list[str]:
    """Stops the server and removes its directory; returns what was left."""
    left: list[str] = []
    if srv.proc.poll() is None:
        srv.proc.send_signal(signal.SIGTERM)
        try:
            srv.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            left.append("the server did not stop within 40 s of SIGTERM")
    try:
        os.killpg(srv.proc.pid, 0)
        left.append("processes of the server's session outlived it")
        os.killpg(srv.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    srv.proc.wait()
    tr = _target() / "debug" / "tinyrun"
    if tr.exists():
        out = subprocess.run(
            [str(tr), "--root", srv.root, "sandbox", "list", "--format", "json"],
            capture_output=True, text=True, timeout=60,
        )
        for r in json.loads(out.stdout or "[]"):
            left.append(f"sandbox record {r.get('id')} left in the root")
            subprocess.run([str(tr), "--root", srv.root, "sandbox", "terminate", r.get("id", "")],
                           capture_output=True, timeout=60)
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f if line.split()[4].startswith(work + "/")]
    for m in reversed(mounts):
        left.append(f"mount {m} left")
        subprocess.run(["umount", "-l", m], capture_output=True)
    shutil.rmtree(work, ignore_errors=True)
    if os.path.exists(work):
        left.append(f"{work} could not be removed")
    return left


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    try:
        import e2b  # noqa: F401
    except ImportError:
        _missing("the e2b SDK is not installed (conformance/install-deps; target/e2b-venv/bin/python -m pytest)")
    if os.geteuid() != 0:
        _missing("the sandbox API server needs root")
    binary = Path(os.environ.get("TINYRUN_API_BIN") or _target() / "debug" / "tinyrun-sandbox-api")
    if not binary.exists():
        _missing(f"{binary} is not built (cargo build --workspace)")
    work = tempfile.mkdtemp(prefix="tinyrun-e2b-")
    # The sandbox's unprivileged user must reach the boxes' root filesystems below.
    os.chmod(work, 0o711)
    keys = (os.urandom(16).hex(), os.urandom(16).hex())
    tokens = Path(work, "tokens")
    tokens.write_text("\n".join(keys) + "\n")
    tokens.chmod(0o600)
    log = Path(work, "server.log")
    url = f"http://127.0.0.1:{_free_port()}"
    args = [
        str(binary), "--root", f"{work}/root", "--socket", f"{work}/api.sock", "--e2b",
        "--listen", url.removeprefix("http://"), "--token-file", str(tokens), "--drain-timeout", "5s",
    ]
    with open(log, "wb") as logf:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True)
    srv = Server(url, keys, f"{work}/root", log, proc)
    saved = {k: os.environ.get(k) for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "NO_PROXY")}
    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=keys[0], NO_PROXY="127.0.0.1")
    try:
        _wait_up(srv)
        yield srv
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        tail = srv.log_tail()
        left = _stop(srv, work)
        if left:
            pytest.fail("the run left things behind:\n  " + "\n  ".join(left) + "\nserver log:\n" + tail, pytrace=False)
