"""The real server for the client's tests: the worktree's built
``tinyrun-sandbox-api`` on a private --root and socket (and a loopback TCP
port with a token) in a temporary directory, started once per test run.
Every box a test makes is terminated when the test ends, pass or fail;
the server is stopped and its directory removed at the end, and the run
fails if a box, a mount or a process of the server is left.

Needs root (the sandbox makes namespaces and cgroups). Without root, or
without the built server, the real-server tests are skipped, unless
``TINYRUN_REQUIRE_ROOT=1`` (CI), where they fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tinyrun import Connection, Sandbox, SandboxError  # noqa: E402

REPO = Path(__file__).resolve().parents[4]


def _target() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")


def api_bin() -> Path:
    return Path(os.environ.get("TINYRUN_API_BIN") or _target() / "debug" / "tinyrun-sandbox-api")


def tinyrun_bin() -> Path:
    # The sandbox CLI of the same build, to look for records left behind.
    return _target() / "debug" / "tinyrun"


def _missing(why: str) -> None:
    if os.environ.get("TINYRUN_REQUIRE_ROOT") == "1":
        pytest.fail(f"{why}, and TINYRUN_REQUIRE_ROOT=1", pytrace=False)
    pytest.skip(why)


@dataclass
class Server:
    socket: str
    url: str
    token: str
    root: str
    log: Path
    proc: subprocess.Popen[bytes]

    def conn(self) -> Connection:
        return Connection(socket=self.socket)

    def tcp(self, token: str | None = None) -> Connection:
        return Connection(url=self.url, token=self.token if token is None else token)

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(srv: Server, deadline: float) -> None:
    while time.monotonic() < deadline:
        if srv.proc.poll() is not None:
            pytest.fail(f"the server exited {srv.proc.returncode} at start:\n{srv.log_tail()}", pytrace=False)
        try:
            doc = srv.conn().request("GET", "/v1/health", timeout=2).json()
            if doc.get("status") == "ok":
                return
        except SandboxError:
            pass
        time.sleep(0.05)
    pytest.fail(f"the server did not answer /v1/health within 30 s:\n{srv.log_tail()}", pytrace=False)


def _mounts_under(path: str) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(path + "/")]


def _stop(srv: Server, work: str) -> list[str]:
    """Stops the server and removes its directory; returns what was left."""
    left: list[str] = []
    try:
        boxes = Sandbox.list(connection=srv.conn())
    except SandboxError as e:
        boxes = []
        left.append(f"could not list the boxes at the end: {e}")
    for b in boxes:
        left.append(f"box {b.sandbox_id} still listed at the end of the run")
        try:
            Sandbox(b.sandbox_id, srv.conn()).kill()
        except SandboxError as e:
            left.append(f"kill {b.sandbox_id}: {e}")
    if srv.proc.poll() is None:
        srv.proc.send_signal(signal.SIGTERM)
        try:
            srv.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            left.append("the server did not stop within 40 s of SIGTERM")
    # The server's session: it and its workers, all started here.
    try:
        os.killpg(srv.proc.pid, 0)
        left.append("processes of the server's session outlived it")
        os.killpg(srv.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    srv.proc.wait()
    # Anything the sandbox itself still records under the private root.
    tr = tinyrun_bin()
    if tr.exists():
        out = subprocess.run(
            [str(tr), "--root", srv.root, "sandbox", "list", "--format", "json"],
            capture_output=True, text=True, timeout=60,
        )
        try:
            records: Any = json.loads(out.stdout or "[]")
        except ValueError:
            records = []
        for r in records if isinstance(records, list) else []:
            rid = r.get("id") if isinstance(r, dict) else None
            if rid:
                left.append(f"sandbox record {rid} left in the root")
                subprocess.run([str(tr), "--root", srv.root, "sandbox", "terminate", rid], capture_output=True, timeout=60)
    for m in reversed(_mounts_under(work)):
        left.append(f"mount {m} left")
        subprocess.run(["umount", "-l", m], capture_output=True)
    shutil.rmtree(work, ignore_errors=True)
    if os.path.exists(work):
        left.append(f"{work} could not be removed")
    return left


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    if os.geteuid() != 0:
        _missing("the sandbox API server needs root")
    binary = api_bin()
    if not binary.exists():
        _missing(f"{binary} is not built (cargo build --workspace)")
    work = tempfile.mkdtemp(prefix="tinyrun-pyclient-")
    # The sandbox's unprivileged user must reach the boxes' root filesystems below.
    os.chmod(work, 0o711)
    token = os.urandom(16).hex()
    tokens = Path(work, "tokens")
    tokens.write_text(token + "\n")
    tokens.chmod(0o600)
    log = Path(work, "server.log")
    port = _free_port()
    args = [
        str(binary), "--root", f"{work}/root", "--socket", f"{work}/api.sock",
        "--listen", f"127.0.0.1:{port}", "--token-file", str(tokens), "--drain-timeout", "5s",
    ]
    with open(log, "wb") as logf:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True)
    srv = Server(f"{work}/api.sock", f"http://127.0.0.1:{port}", token, f"{work}/root", log, proc)
    try:
        _wait_up(srv, time.monotonic() + 30)
        yield srv
    finally:
        tail = srv.log_tail()
        left = _stop(srv, work)
        if left:
            pytest.fail("the run left things behind:\n  " + "\n  ".join(left) + "\nserver log:\n" + tail, pytrace=False)


@pytest.fixture
def make(server: Server) -> Iterator[Callable[..., Sandbox]]:
    """``make(**options)``: a box on the test server, terminated when the test ends."""
    made: list[Sandbox] = []

    def factory(**kw: Any) -> Sandbox:
        kw.setdefault("connection", server.conn())
        sbx = Sandbox.create(**kw)
        made.append(sbx)
        return sbx

    yield factory
    for sbx in made:
        sbx.kill()
