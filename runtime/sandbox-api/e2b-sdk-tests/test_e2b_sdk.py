"""The unmodified, pinned e2b SDK's own calls against ``--e2b``: a box made,
commands run in the foreground and the background (waited for, killed),
files written, read and listed, a new deadline, the box listed and ended;
and what another client, a wrong key or another box's token may not do."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from e2b import Sandbox
from e2b.exceptions import AuthenticationException, NotFoundException, SandboxException
from e2b.sandbox.commands.command_handle import CommandExitException

from conftest import Server


@pytest.fixture
def sbx(server: Server) -> Iterator[Sandbox]:
    s = Sandbox.create(timeout=120)
    try:
        yield s
    finally:
        s.kill()


def ids(**opts: object) -> list[str]:
    return [i.sandbox_id for i in Sandbox.list(**opts).next_items()]


def test_commands_in_the_foreground(sbx: Sandbox) -> None:
    r = sbx.commands.run("echo out; echo err >&2; echo $GREETING", envs={"GREETING": "hi there"})
    assert (r.exit_code, r.stdout, r.stderr) == (0, "out\nhi there\n", "err\n")
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo partial; exit 3")
    assert (e.value.exit_code, e.value.stdout) == (3, "partial\n")
    # What a command leaves running holds its output open: it ends anyway.
    started = time.monotonic()
    assert sbx.commands.run("sleep 30 & echo left").stdout == "left\n"
    assert time.monotonic() - started < 10
    # The box keeps its files between commands.
    sbx.commands.run("echo kept > /tmp/k")
    assert sbx.commands.run("cat /tmp/k").stdout == "kept\n"
    assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"


def test_commands_in_the_background(sbx: Sandbox) -> None:
    h = sbx.commands.run("echo early; sleep 0.3; echo late", background=True)
    r = h.wait()
    assert (r.exit_code, r.stdout) == (0, "early\nlate\n")
    started = time.monotonic()
    h = sbx.commands.run("echo started; sleep 60", background=True)
    assert h.kill() is True
    with pytest.raises(CommandExitException) as e:
        h.wait()
    assert e.value.exit_code != 0
    assert time.monotonic() - started < 20, "the kill ended the command, not its timeout"
    # It is gone: a second kill finds nothing, and nothing is left running.
    assert sbx.commands.kill(h.pid) is False
    procs = sbx.commands.run("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done").stdout
    assert "bash" in procs and "sleep 60" not in procs


def test_files_written_read_and_listed(sbx: Sandbox) -> None:
    info = sbx.files.write("/tmp/hello.txt", "hello from the sdk\n")
    assert info.path == "/tmp/hello.txt"
    sbx.files.write("/tmp/bin.dat", bytes(range(256)))
    assert sbx.files.read("/tmp/hello.txt") == "hello from the sdk\n"
    assert bytes(sbx.files.read("/tmp/bin.dat", format="bytes")) == bytes(range(256))
    # What the box's commands see is what was written.
    assert sbx.commands.run("wc -c < /tmp/bin.dat").stdout.strip() == "256"
    sbx.commands.run("mkdir -p /tmp/sub && echo x > /tmp/sub/y")
    entries = {e.name: e for e in sbx.files.list("/tmp")}
    assert {"hello.txt", "bin.dat", "sub"} <= set(entries)
    assert entries["bin.dat"].size == 256 and entries["bin.dat"].path == "/tmp/bin.dat"
    assert entries["sub"].type.value == "dir" and entries["hello.txt"].type.value == "file"
    with pytest.raises(SandboxException):
        sbx.files.read("/tmp/no-such-file")


def test_timeout_list_and_kill(server: Server) -> None:
    s = Sandbox.create(timeout=60)
    try:
        listed = {i.sandbox_id: i for i in Sandbox.list().next_items()}
        assert s.sandbox_id in listed and listed[s.sandbox_id].state.value == "running"
        before = listed[s.sandbox_id].end_at
        s.set_timeout(600)
        after = {i.sandbox_id: i for i in Sandbox.list().next_items()}[s.sandbox_id].end_at
        assert 500 < (after - before).total_seconds() < 700
    finally:
        s.kill()
    assert s.sandbox_id not in ids()
    assert Sandbox.kill(s.sandbox_id) is False


def test_other_clients_and_wrong_keys_are_refused(server: Server, sbx: Sandbox) -> None:
    other = server.keys[1]
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="0" * 32)
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key="0" * 32).next_items()
    # Another key is another client: it neither sees nor touches this box.
    assert sbx.sandbox_id not in ids(api_key=other)
    assert Sandbox.kill(sbx.sandbox_id, api_key=other) is False
    with pytest.raises(NotFoundException):
        Sandbox.set_timeout(sbx.sandbox_id, 600, api_key=other)
    assert sbx.commands.run("echo alive").stdout == "alive\n"

    # The daemon takes a box's own access token only: not another box's,
    # not an API key, not a token of the box's id made up.
    theirs = Sandbox.create(api_key=other, timeout=60)
    try:
        def start(box: str, headers: dict[str, str]) -> str:
            """Starts /bin/true in `box` by hand: "ran", or what refused it."""
            msg = json.dumps({"process": {"cmd": "/bin/true"}}).encode()
            body = b"\0" + len(msg).to_bytes(4, "big") + msg
            req = urllib.request.Request(
                server.url + "/process.Process/Start", data=body, method="POST",
                headers={"Content-Type": "application/connect+json", "E2b-Sandbox-Id": box, **headers},
            )
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    data = r.read()
            except urllib.error.HTTPError as e:
                return f"refused: {e.code}"
            frames = []
            while data:
                n = int.from_bytes(data[1:5], "big")
                frames.append((data[0], json.loads(data[5:5 + n])))
                data = data[5 + n:]
            end = [m for flags, m in frames if flags & 2]
            if end and "error" in end[0]:
                return f"refused: {end[0]['error']['code']}"
            assert any("start" in m.get("event", {}) for _, m in frames), frames
            return "ran"

        mine = sbx._envd_access_token
        assert start(sbx.sandbox_id, {"X-Access-Token": mine}) == "ran"
        assert start(theirs.sandbox_id, {"X-Access-Token": mine}) == "refused: 401"
        assert start(theirs.sandbox_id, {"X-Access-Token": "ab" * 32}) == "refused: 401"
        assert start(theirs.sandbox_id, {"X-API-KEY": server.keys[0]}) == "refused: unauthenticated"
        assert start(theirs.sandbox_id, {"X-API-KEY": other}) == "refused: unauthenticated"
        assert theirs.sandbox_id not in ids()
    finally:
        theirs.kill()
