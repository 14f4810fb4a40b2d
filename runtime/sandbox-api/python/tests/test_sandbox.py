"""The client against the real server (conftest.py starts it)."""

from __future__ import annotations

import hashlib
import os
import time
from datetime import datetime, timezone
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Server

from tinyrun import (
    AuthenticationError,
    CommandExitError,
    InvalidArgumentError,
    NotFoundError,
    PolicyError,
    Sandbox,
    SandboxError,
    run,
)

Make = Callable[..., Sandbox]


def listed(server: Server) -> set[str]:
    return {b.sandbox_id for b in Sandbox.list(connection=server.conn())}


def test_create_run_kill(make: Make, server: Server) -> None:
    sbx = make(type="nano")
    r = sbx.commands.run("echo hello; echo oops >&2")
    assert (r.stdout, r.stderr, r.exit_code, r.error) == ("hello\n", "oops\n", 0, None)
    assert r.ok and not r.timed_out
    assert sbx.is_running()
    assert sbx.kill() is True
    assert sbx.sandbox_id not in listed(server)
    assert sbx.kill() is False
    with pytest.raises(NotFoundError) as e:
        sbx.commands.run("true")
    assert e.value.status == 404 and e.value.code == "not_found"


def test_context_manager_kills_the_box(server: Server) -> None:
    with Sandbox.create(type="nano", connection=server.conn()) as sbx:
        assert sbx.commands.run(["/bin/echo", "in", "the box"]).stdout == "in the box\n"
        kept = sbx.sandbox_id
        assert kept in listed(server)
    assert kept not in listed(server)
    with pytest.raises(NotFoundError):
        Sandbox.connect(kept, connection=server.conn())
    # An exception in the block: the box goes, the exception comes through.
    with pytest.raises(ZeroDivisionError):
        with Sandbox.create(type="nano", connection=server.conn()) as sbx:
            kept = sbx.sandbox_id
            1 / 0
    assert kept not in listed(server)


def test_connect_to_a_box(make: Make, server: Server) -> None:
    sbx = make(type="nano")
    sbx.files.write("/tmp/mark", "here")
    again = Sandbox.connect(sbx.sandbox_id, connection=server.conn())
    assert again.files.read("/tmp/mark") == "here"
    with pytest.raises(NotFoundError):
        Sandbox.connect("no-such-box", connection=server.conn())


def test_env_and_cwd(make: Make) -> None:
    sbx = make(type="nano", envs={"BOX_VAR": "from the box", "BOTH": "box"})
    r = sbx.commands.run('echo "$BOX_VAR|$CMD_VAR|$BOTH"', envs={"CMD_VAR": "from the command", "BOTH": "command"})
    assert r.stdout == "from the box|from the command|command\n", r
    sbx.commands.run("mkdir -p /tmp/work/sub", check=True)
    assert sbx.commands.run("pwd", cwd="/tmp/work/sub").stdout == "/tmp/work/sub\n"
    assert sbx.commands.run(["pwd"], cwd="/tmp/work").stdout == "/tmp/work\n"
    streamed: list[str] = []
    assert sbx.commands.run(["pwd"], cwd="/tmp/work/sub", on_stdout=streamed.append).exit_code == 0
    assert "".join(streamed) == "/tmp/work/sub\n"
    assert sbx.commands.run("exit 7", cwd="/tmp").exit_code == 7
    with pytest.raises(InvalidArgumentError) as missing:
        sbx.commands.run("pwd", cwd="/no/such/dir")
    assert missing.value.field == "cwd" and "/no/such/dir" in str(missing.value), missing.value
    for bad in ("tmp/work", "/tmp/../etc"):
        with pytest.raises(InvalidArgumentError) as refused:
            sbx.commands.run("pwd", cwd=bad)
        assert refused.value.field == "cwd", refused.value


def test_streaming_callbacks(make: Make) -> None:
    sbx = make(type="nano")
    out: list[tuple[float, str]] = []
    err: list[str] = []
    t0 = time.monotonic()
    r = sbx.commands.run(
        "echo first; echo warn >&2; sleep 2; printf 'second\\n'; printf 'caf\\303'; printf '\\251\\n'",
        on_stdout=lambda s: out.append((time.monotonic() - t0, s)),
        on_stderr=err.append,
    )
    ended = time.monotonic() - t0
    assert r.exit_code == 0 and r.error is None
    assert "".join(s for _, s in out) == "first\nsecond\ncafé\n" == r.stdout
    assert "".join(err) == "warn\n" == r.stderr
    # The first line came while the command still slept, not with the result.
    assert out[0][1].startswith("first") and out[0][0] < ended - 1.0, (out, ended)


def test_stdin(make: Make) -> None:
    sbx = make(type="nano")
    assert sbx.commands.run("tr a-z A-Z", stdin="shout\n").stdout == "SHOUT\n"
    blob = bytes(range(256)) * 64
    r = sbx.commands.run("cat", stdin=blob)
    assert r.stdout_bytes == blob and r.exit_code == 0
    digest = sbx.commands.run("sha256sum", stdin=blob, on_stdout=lambda _: None).stdout.split()[0]
    assert digest == hashlib.sha256(blob).hexdigest()
    # No stdin: /dev/null, the command does not wait.
    assert sbx.commands.run("cat", timeout=5).stdout == ""


def test_timeout(make: Make) -> None:
    sbx = make(type="nano")
    t0 = time.monotonic()
    r = sbx.commands.run("echo started; sleep 30", timeout=1)
    assert time.monotonic() - t0 < 10
    assert r.timed_out and r.exit_code is None and r.signal == "SIGKILL" and not r.ok
    assert r.stdout == "started\n"
    streamed = sbx.commands.run("sleep 30", timeout="500ms", on_stdout=lambda _: None)
    assert streamed.timed_out and streamed.signal == "SIGKILL"
    with pytest.raises(CommandExitError) as e:
        sbx.commands.run("sleep 30", timeout=1, check=True)
    assert "timed out" in str(e.value)


def test_nonzero_exit(make: Make) -> None:
    sbx = make(type="nano")
    r = sbx.commands.run("echo partial; exit 3")
    assert (r.exit_code, r.error, r.stdout, r.ok) == (3, None, "partial\n", False)
    assert sbx.commands.run("no-such-command-here").exit_code == 127
    with pytest.raises(CommandExitError) as e:
        sbx.commands.run("echo why >&2; exit 4", check=True)
    assert e.value.exit_code == 4 and e.value.stderr == "why\n"
    assert sbx.commands.run("kill -9 $$").signal == "SIGKILL"


def test_files_round_trip(make: Make) -> None:
    sbx = make(type="nano")
    sbx.files.write("/tmp/hello.txt", "héllo\n")
    assert sbx.files.read("/tmp/hello.txt") == "héllo\n"
    assert sbx.commands.run("cat /tmp/hello.txt").stdout == "héllo\n"
    blob = os.urandom(300_000) + bytes(range(256))
    sbx.files.write("/tmp/data/blob.bin", blob)
    assert sbx.files.read("/tmp/data/blob.bin", format="bytes") == blob
    got = sbx.commands.run("sha256sum /tmp/data/blob.bin").stdout.split()[0]
    assert got == hashlib.sha256(blob).hexdigest()
    sbx.commands.run("mkdir /tmp/data/sub && ln -s blob.bin /tmp/data/link", check=True)
    entries = {e.name: e for e in sbx.files.list("/tmp/data")}
    assert set(entries) == {"blob.bin", "sub", "link"}
    assert (entries["blob.bin"].type, entries["blob.bin"].size) == ("file", len(blob))
    assert entries["sub"].type == "dir" and entries["link"].type == "symlink"
    assert entries["blob.bin"].path == "/tmp/data/blob.bin"
    assert sbx.files.exists("/tmp/data/sub") and not sbx.files.exists("/tmp/data/nope")
    # Written by the box, read by the client.
    sbx.commands.run("printf 'from the box' > /tmp/out.txt", check=True)
    assert sbx.files.read("/tmp/out.txt") == "from the box"
    with pytest.raises(SandboxError) as e:
        sbx.files.read("/tmp/no-such-file")
    assert e.value.status in (400, 404)


def test_directory_upload_and_download(make: Make, tmp_path: Path) -> None:
    sbx = make(type="nano")
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("VALUE = 42\n")
    (src / "data.bin").write_bytes(bytes(range(256)))
    sbx.files.upload_dir(src, "/tmp/proj")
    r = sbx.commands.run("python3 -c 'import pkg.mod; print(pkg.mod.VALUE)'", cwd="/tmp/proj")
    assert r.stdout == "42\n", r
    sbx.commands.run("echo made > /tmp/proj/pkg/new.txt", check=True)
    skipped = sbx.files.download_dir("/tmp/proj", tmp_path / "back")
    assert skipped == []
    assert (tmp_path / "back" / "pkg" / "new.txt").read_text() == "made\n"
    assert (tmp_path / "back" / "data.bin").read_bytes() == bytes(range(256))


def test_path_escape_refused(make: Make, server: Server, tmp_path: Path) -> None:
    sbx = make(type="nano")
    # A link the box planted to a host path: the copy out is refused, the
    # host's file does not come back.
    sbx.commands.run("ln -s /etc/shadow /tmp/leak && mkdir /tmp/d && ln -s /etc /tmp/d/etc", check=True)
    with pytest.raises(SandboxError) as e:
        sbx.files.read("/tmp/leak")
    assert e.value.status == 400, e.value
    with pytest.raises(SandboxError) as e:
        sbx.files.download_dir("/tmp/d", tmp_path / "out")
    assert e.value.status == 400 and "outside" in e.value.message, e.value
    assert not any((tmp_path / "out").rglob("*"))
    # A relative path is refused by the client, and by the server when sent.
    with pytest.raises(InvalidArgumentError) as e:
        sbx.files.read("../../etc/passwd")
    assert e.value.field == "path"
    with pytest.raises(InvalidArgumentError) as e:
        server.conn().request("GET", f"/v1/boxes/{sbx.sandbox_id}/files", query={"path": "../../etc/passwd"})
    assert e.value.status == 400 and e.value.field == "path"


def test_policy_refusal(server: Server) -> None:
    before = listed(server)
    with pytest.raises(PolicyError) as e:
        Sandbox.create(type="large", connection=server.conn())
    assert (e.value.status, e.value.code, e.value.field) == (403, "forbidden", "type")
    assert "type" in str(e.value)
    with pytest.raises(PolicyError) as e:
        Sandbox.create(type="nano", no_seccomp=True, connection=server.conn())
    assert e.value.field == "no_seccomp"
    with pytest.raises(InvalidArgumentError):
        Sandbox.create(type="nano", no_such_option=1, connection=server.conn())
    # Refused: no box was made.
    assert listed(server) == before


def _left(expires_at: str | None) -> float:
    assert expires_at is not None
    return (datetime.fromisoformat(expires_at) - datetime.now(timezone.utc)).total_seconds()


def test_lifetime(make: Make) -> None:
    sbx = make(type="nano", timeout=120)
    assert sbx.get_info().status == "running"
    assert 50 < _left(sbx.set_timeout(60).expires_at) <= 61
    assert 500 < _left(sbx.set_timeout("10m").expires_at) <= 601
    with pytest.raises(PolicyError) as e:
        sbx.set_timeout("100h")
    assert e.value.field == "lifetime"


def test_box_expires(server: Server) -> None:
    short = Sandbox.create(type="nano", connection=server.conn())

    def gone(call: Callable[[], object], what: str) -> None:
        # An expired box is gone: 404, as GET says (the message says when it expired).
        with pytest.raises(NotFoundError) as e:
            call()
        assert "expired" in e.value.message or "not" in e.value.message, f"{what}: {e.value.message!r}"

    try:
        short.set_timeout(1)
        deadline = time.monotonic() + 30
        while short.is_running() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not short.is_running(), "the box outlived its lifetime by 30 s"
        assert short.sandbox_id not in listed(server)
        gone(lambda: short.commands.run("true"), "POST commands")
        gone(lambda: short.files.read("/etc/hostname"), "GET files")
    finally:
        killed = short.kill()
    assert killed is False, "DELETE of an expired box found it"


def test_list(make: Make, server: Server) -> None:
    a, b = make(type="nano"), make(type="nano")
    boxes = {x.sandbox_id: x for x in Sandbox.list(connection=server.conn())}
    assert {a.sandbox_id, b.sandbox_id} <= set(boxes)
    assert boxes[a.sandbox_id].status == "running"
    a.kill()
    assert a.sandbox_id not in listed(server) and b.sandbox_id in listed(server)


def test_run_code(make: Make) -> None:
    sbx = make(type="nano")
    assert sbx.run_code("print(sum(range(10)))").stdout == "45\n"
    r = sbx.run_code("import sys; print('x', file=sys.stderr); raise SystemExit(5)")
    assert (r.exit_code, r.stderr) == (5, "x\n")
    r = sbx.run_code("1/0")
    assert r.exit_code == 1 and "ZeroDivisionError" in r.stderr
    assert sbx.run_code("echo $0", language="sh").exit_code == 0
    with pytest.raises(InvalidArgumentError):
        sbx.run_code("x", language="cobol")


def test_tcp_with_token(server: Server) -> None:
    with Sandbox.create(type="nano", connection=server.tcp()) as sbx:
        assert sbx.commands.run("echo tcp").stdout == "tcp\n"
        chunks: list[str] = []
        assert sbx.commands.run("echo a; sleep 0.3; echo b", on_stdout=chunks.append).stdout == "a\nb\n"
        assert "".join(chunks) == "a\nb\n"
        assert [b.sandbox_id for b in Sandbox.list(connection=server.tcp())] == [sbx.sandbox_id]
    with pytest.raises(AuthenticationError) as e:
        Sandbox.list(connection=server.tcp(token="not-the-token"))
    assert e.value.status == 401


def test_tcp_client_sees_only_its_boxes(make: Make, server: Server) -> None:
    mine = make(type="nano")
    assert mine.sandbox_id not in {b.sandbox_id for b in Sandbox.list(connection=server.tcp())}
    with pytest.raises(NotFoundError):
        Sandbox(mine.sandbox_id, server.tcp()).commands.run("true")
    with pytest.raises(NotFoundError):
        Sandbox(mine.sandbox_id, server.tcp()).files.read("/etc/hostname")
    assert Sandbox(mine.sandbox_id, server.tcp()).kill() is False
    assert mine.is_running()


def test_one_shot_run(server: Server) -> None:
    before = listed(server)
    r = run("echo $GREETING; cat", type="nano", envs={"GREETING": "hi"}, stdin="in\n", connection=server.conn())
    assert (r.stdout, r.exit_code, r.error) == ("hi\nin\n", 0, None)
    assert run(["sh", "-c", "exit 9"], type="nano", connection=server.conn()).exit_code == 9
    assert run("sleep 20", type="nano", timeout=1, connection=server.conn()).timed_out
    with pytest.raises(PolicyError) as e:
        run("true", type="nano", writable_root=True, connection=server.conn())
    assert e.value.field == "writable_root"
    assert listed(server) == before
