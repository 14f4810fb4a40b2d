"""Parsing and safety checks of the client, without the server: answers
come from a canned HTTP responder on a unix socket, archives are built here."""

from __future__ import annotations

import base64
import http.server
import io
import json
import socketserver
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tinyrun import (
    CommandResult,
    Connection,
    InvalidArgumentError,
    NotFoundError,
    PolicyError,
    ProtocolError,
    Sandbox,
    SandboxError,
    UnavailableError,
)
from tinyrun.commands import argv, seconds
from tinyrun.exceptions import from_answer
from tinyrun.files import unpack

RESULT = {
    "schema_version": 2, "error": None, "exit_code": 0, "signal": None, "timed_out": False,
    "oom_killed": False, "duration_ms": 5, "cpu_ms": 1, "peak_memory_bytes": 1,
    "stdout": {"text": "", "encoding": "utf-8", "truncated": False},
    "stderr": {"text": "", "encoding": "utf-8", "truncated": False},
}


class Canned:
    """What the responder answers, and what it was asked."""

    def __init__(self) -> None:
        self.status = 200
        self.ctype = "application/json"
        self.body = b"{}"
        self.chunks: list[bytes] | None = None
        self.requests: list[dict[str, Any]] = []


class _Unix(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that stops reading on a bad stream is what some tests do.
        pass


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[Canned, Connection]]:
    canned = Canned()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: Any) -> None:
            pass

        def _answer(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            canned.requests.append(
                {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": self.rfile.read(n)}
            )
            self.send_response(canned.status)
            self.send_header("Content-Type", canned.ctype)
            if canned.chunks is None:
                self.send_header("Content-Length", str(len(canned.body)))
                self.end_headers()
                self.wfile.write(canned.body)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for c in canned.chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

        do_GET = do_POST = do_PUT = do_DELETE = _answer

    path = str(tmp_path / "fake.sock")
    srv = _Unix(path, Handler)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield canned, Connection(socket=path, request_timeout=5)
    finally:
        srv.shutdown()
        srv.server_close()


def test_error_answers_become_typed_exceptions() -> None:
    e = from_answer(403, b'{"error":"type: the preset \\"large\\" is not allowed","code":"forbidden","field":"type"}')
    assert isinstance(e, PolicyError) and (e.status, e.code, e.field) == (403, "forbidden", "type")
    assert "large" in e.message and "field type" in str(e)
    e = from_answer(404, b'{"error":"no sandbox x","code":"not_found","field":null}')
    assert isinstance(e, NotFoundError) and e.field is None
    e = from_answer(502, b"<html>bad gateway</html>")
    assert type(e) is SandboxError and "502" in e.message and "bad gateway" in e.message
    assert isinstance(from_answer(404, b"not json"), NotFoundError)


def test_result_parsing() -> None:
    doc = dict(RESULT, exit_code=None, signal="SIGKILL", timed_out=True)
    doc["stdout"] = {"text": base64.b64encode(b"\xff\xfeok").decode(), "encoding": "base64", "truncated": True}
    r = CommandResult.parse(doc)
    assert r.stdout_bytes == b"\xff\xfeok" and r.stdout.endswith("ok") and r.stdout_truncated
    assert (r.exit_code, r.signal, r.timed_out, r.ok) == (None, "SIGKILL", True, False)
    for bad in ({**RESULT, "exit_code": "0"}, {**RESULT, "timed_out": 1}, {**RESULT, "exit_code": True},
                {k: v for k, v in RESULT.items() if k != "schema_version"},
                {**RESULT, "stdout": {"text": "%%%", "encoding": "base64", "truncated": False}},
                {**RESULT, "stdout": {"text": "x", "encoding": "rot13", "truncated": False}}, [RESULT]):
        with pytest.raises(ProtocolError):
            CommandResult.parse(bad)


def test_request_shape(fake: tuple[Canned, Connection]) -> None:
    canned, conn = fake
    canned.body = json.dumps(RESULT).encode()
    Sandbox("b1", conn).commands.run("echo hi", envs={"A": "1"}, cwd="/w", timeout="2s", stdin=b"\x00\x01")
    req = canned.requests[-1]
    assert (req["method"], req["path"]) == ("POST", "/v1/boxes/b1/commands")
    sent = json.loads(req["body"])
    assert (sent["command"], sent["cwd"]) == (["/bin/sh", "-c", "echo hi"], "/w")
    assert (sent["env"], sent["timeout"], sent["stdin_base64"]) == (["A=1"], "2s", "AAE=")
    assert "stdin" not in sent
    canned.status, canned.body = 201, b'{"id":"new-box","status":"running"}'
    sbx = Sandbox.create("nano", timeout=60, command_timeout="5s", envs={"K": "v"}, user="1000", connection=conn)
    assert sbx.sandbox_id == "new-box"
    sent = json.loads(canned.requests[-1]["body"])
    assert sent == {"type": "nano", "lifetime": 60, "timeout": "5s", "env": ["K=v"], "user": "1000"}
    # A box id is one path segment, whatever it holds.
    canned.status, canned.body = 200, b'{"id":"x","status":"running"}'
    Sandbox("../boxes?x", conn).get_info()
    assert canned.requests[-1]["path"] == "/v1/boxes/..%2Fboxes%3Fx"


def test_streamed_output_reassembled(fake: tuple[Canned, Connection]) -> None:
    canned, conn = fake
    canned.ctype = "application/x-ndjson"
    # "é" split across two chunks, each then sent as base64; one event
    # split across two HTTP chunks.
    events = [
        {"type": "stdout", "data": "caf", "encoding": "utf-8"},
        {"type": "stdout", "data": base64.b64encode(b"\xc3").decode(), "encoding": "base64"},
        {"type": "stderr", "data": "warn\n", "encoding": "utf-8"},
        {"type": "stdout", "data": base64.b64encode(b"\xa9!\n").decode(), "encoding": "base64"},
        {"type": "exit", "result": dict(RESULT, exit_code=2)},
    ]
    lines = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    canned.chunks = [lines[:10], lines[10:]]
    out: list[str] = []
    err: list[str] = []
    r = Sandbox("b", conn).commands.run("x", on_stdout=out.append, on_stderr=err.append)
    assert "".join(out) == "café!\n" == r.stdout and r.stdout_bytes == "café!\n".encode()
    assert all("\ufffd" not in s for s in out)
    assert "".join(err) == "warn\n" == r.stderr and r.exit_code == 2
    assert canned.requests[-1]["headers"]["Accept"] == "application/x-ndjson"


def test_stream_without_exit_is_an_error(fake: tuple[Canned, Connection]) -> None:
    canned, conn = fake
    canned.ctype = "application/x-ndjson"
    canned.chunks = [b'{"type":"stdout","data":"x","encoding":"utf-8"}\n']
    with pytest.raises(ProtocolError, match="exit event"):
        Sandbox("b", conn).commands.run("x", on_stdout=lambda _: None)
    canned.chunks = [b'{"type":"surprise"}\n']
    with pytest.raises(ProtocolError, match="unknown type"):
        Sandbox("b", conn).commands.run("x", on_stdout=lambda _: None)


def test_error_before_stream(fake: tuple[Canned, Connection]) -> None:
    canned, conn = fake
    canned.status, canned.body = 404, b'{"error":"no sandbox b","code":"not_found"}'
    with pytest.raises(NotFoundError, match="no sandbox b"):
        Sandbox("b", conn).commands.run("x", on_stdout=lambda _: None)
    assert Sandbox("b", conn).kill() is False


def test_unreachable_server(tmp_path: Path) -> None:
    with pytest.raises(UnavailableError) as e:
        Sandbox.list(socket=tmp_path / "none.sock")
    assert "none.sock" in str(e.value)


def test_connection_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="loopback"):
        Connection(url="http://example.com:8080", token="t")
    with pytest.raises(InvalidArgumentError):
        Connection(url="ftp://127.0.0.1")
    with pytest.raises(InvalidArgumentError):
        Connection(socket="/x", url="http://127.0.0.1:1")
    Connection(url="http://[::1]:8080", token="t")
    Connection(url="https://example.com", token="t")


def test_argv_and_durations() -> None:
    assert argv("echo") == ["/bin/sh", "-c", "echo"]
    assert argv(["ls", "-l"]) == ["ls", "-l"]
    for bad in ([], ["ls", 3]):
        with pytest.raises(InvalidArgumentError):
            argv(bad)  # type: ignore[arg-type]
    assert [seconds(d) for d in (None, 3, 1.5, "2s", "500ms", "2m", "1h30m")] == [0, 3, 1.5, 2, 0.5, 120, 5400]


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for ti, data in members:
            if data is not None:
                ti.size = len(data)
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname, ti.mode = kind, link, 0o644
    return ti


def test_unpack_writes_plain_files_only(tmp_path: Path) -> None:
    data = _tar([
        (_entry("d", tarfile.DIRTYPE), None),
        (_entry("d/f.txt"), b"ok"),
        (_entry("./g.txt"), b"g"),
        (_entry("d/link", tarfile.SYMTYPE, "/etc/passwd"), None),
        (_entry("hard", tarfile.LNKTYPE, "d/f.txt"), None),
    ])
    skipped = unpack(data, str(tmp_path / "out"))
    assert sorted(skipped) == ["d/link", "hard"]
    assert (tmp_path / "out/d/f.txt").read_text() == "ok" and (tmp_path / "out/g.txt").read_text() == "g"
    assert not (tmp_path / "out/d/link").exists() and not (tmp_path / "out/hard").exists()


@pytest.mark.parametrize("name", ["../evil", "/abs/evil", "d/../../evil"])
def test_unpack_refuses_names_outside(tmp_path: Path, name: str) -> None:
    with pytest.raises(ProtocolError, match="outside"):
        unpack(_tar([(_entry(name), b"x")]), str(tmp_path / "out"))
    assert not (tmp_path / "evil").exists() and not Path("/abs/evil").exists()


def test_unpack_never_writes_through_a_link(tmp_path: Path) -> None:
    # The archive makes a link, then writes below it: the link is not made,
    # so the write cannot follow it.
    outside = tmp_path / "outside"
    outside.mkdir()
    data = _tar([(_entry("l", tarfile.SYMTYPE, str(outside)), None), (_entry("l/pwned"), b"x")])
    unpack(data, str(tmp_path / "out"))
    assert not (outside / "pwned").exists() and (tmp_path / "out/l/pwned").read_text() == "x"
    # A destination that is not new or empty is refused: it could hold links.
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "l").symlink_to(outside)
    with pytest.raises(InvalidArgumentError):
        unpack(data, str(tmp_path / "full"))
    (tmp_path / "alink").symlink_to(outside)
    with pytest.raises(InvalidArgumentError):
        unpack(data, str(tmp_path / "alink"))
    assert not (outside / "pwned").exists()
