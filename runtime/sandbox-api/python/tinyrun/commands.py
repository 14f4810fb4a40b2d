"""``sandbox.commands``: commands in a live box (``POST /v1/boxes/{id}/commands``)."""

from __future__ import annotations

import base64
import codecs
import json
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .exceptions import CommandExitError, InvalidArgumentError, ProtocolError, UnavailableError
from .models import CommandResult, decode_chunk

if TYPE_CHECKING:
    from ._http import Connection

Duration = float | int | str
Size = int | str
OutputHandler = Callable[[str], None]

def argv(cmd: str | Sequence[str]) -> list[str]:
    """The command vector: a string is a shell command line (``/bin/sh -c``),
    a sequence is run as it is."""
    if isinstance(cmd, str):
        args = ["/bin/sh", "-c", cmd]
    else:
        args = list(cmd)
        if not args or not all(isinstance(a, str) for a in args):
            raise InvalidArgumentError("cmd: a shell command line or a non-empty list of strings", field="command")
    return args


def env_list(envs: Mapping[str, str] | None) -> list[str]:
    out = []
    for k, v in (envs or {}).items():
        if not k or "=" in k or "\0" in k or "\0" in v:
            raise InvalidArgumentError(f"envs: bad variable {k!r}", field="env")
        out.append(f"{k}={v}")
    return out


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}


def seconds(d: Duration | None) -> float:
    """Seconds of a duration, for the client's own socket timeouts (0 when
    it does not read as one: the server then refuses it anyway)."""
    if d is None:
        return 0.0
    if not isinstance(d, str):
        return float(d)
    total = 0.0
    parts = re.findall(r"\s*([0-9.]+)\s*(ms|s|m|h|)", d)
    for n, unit in parts:
        try:
            total += float(n) * _UNITS[unit]
        except ValueError:
            return 0.0
    return total


class _Sink:
    """One output stream of a streamed command: its bytes, and the text
    handed to the callback, decoded across chunk boundaries."""

    def __init__(self, handler: OutputHandler | None) -> None:
        self.data = bytearray()
        self.handler = handler
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, chunk: bytes) -> None:
        self.data += chunk
        if self.handler is not None:
            text = self.decoder.decode(chunk)
            if text:
                self.handler(text)

    def close(self) -> None:
        if self.handler is not None:
            text = self.decoder.decode(b"", final=True)
            if text:
                self.handler(text)


class Commands:
    """Runs commands in one box."""

    def __init__(self, conn: Connection, sandbox_id: str) -> None:
        self._conn = conn
        self._id = sandbox_id

    def run(
        self,
        cmd: str | Sequence[str],
        *,
        envs: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: Duration | None = None,
        stdin: str | bytes | None = None,
        on_stdout: OutputHandler | None = None,
        on_stderr: OutputHandler | None = None,
        kill_children: bool = False,
        output_cap: Size | None = None,
        check: bool = False,
        request_timeout: float | None = None,
    ) -> CommandResult:
        """Runs ``cmd`` (a shell command line, or an argument vector) and waits.

        ``timeout``: seconds (or "500ms", "2m") before the command is killed;
        the box's default when None. ``stdin``: the command's input
        (/dev/null when None). With ``on_stdout``/``on_stderr`` the output
        is streamed to them as it comes. ``check``: raise CommandExitError
        unless the command exited 0. A non-zero exit, a timeout or a signal
        is otherwise a result, not an exception.
        """
        req: dict[str, Any] = {"command": argv(cmd)}
        if cwd is not None:
            req["cwd"] = cwd
        if envs:
            req["env"] = env_list(envs)
        if timeout is not None:
            req["timeout"] = timeout
        if isinstance(stdin, str):
            req["stdin"] = stdin
        elif stdin is not None:
            req["stdin_base64"] = base64.b64encode(stdin).decode()
        if kill_children:
            req["kill_children"] = True
        if output_cap is not None:
            req["output_cap"] = output_cap
        path = f"/v1/boxes/{urllib.parse.quote(self._id, safe='')}/commands"
        # The answer comes when the command ends: wait for its time limit
        # on top of the client's usual patience.
        base = self._conn.request_timeout if request_timeout is None else request_timeout
        wait = None if base is None else base + seconds(timeout)
        if on_stdout is None and on_stderr is None:
            result = CommandResult.parse(self._conn.request("POST", path, json_body=req, timeout=wait).json())
        else:
            result = self._stream(path, req, on_stdout, on_stderr, wait)
        if check and not result.ok:
            raise CommandExitError(result)
        return result

    def _stream(
        self,
        path: str,
        req: dict[str, Any],
        on_stdout: OutputHandler | None,
        on_stderr: OutputHandler | None,
        wait: float | None,
    ) -> CommandResult:
        sinks = {"stdout": _Sink(on_stdout), "stderr": _Sink(on_stderr)}
        headers = {"Accept": "application/x-ndjson"}
        with self._conn.stream("POST", path, json_body=req, headers=headers, timeout=wait) as resp:
            ctype = resp.getheader("Content-Type", "")
            if "application/x-ndjson" not in ctype:
                # A server that does not stream answers with the whole result.
                return CommandResult.parse(json.loads(resp.read()))
            while True:
                try:
                    line = resp.readline()
                except OSError as e:
                    raise UnavailableError(f"the command's stream broke off: {e}", code="unavailable") from e
                if not line:
                    raise ProtocolError("the command's stream ended without its exit event")
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError as e:
                    raise ProtocolError(f"a stream line is not JSON: {line[:200]!r}") from e
                kind = event.get("type") if isinstance(event, dict) else None
                if kind in sinks:
                    sinks[kind].feed(decode_chunk(event.get("data"), event.get("encoding"), kind))
                elif kind == "exit":
                    for s in sinks.values():
                        s.close()
                    return CommandResult.parse(
                        event.get("result"), bytes(sinks["stdout"].data), bytes(sinks["stderr"].data)
                    )
                else:
                    raise ProtocolError(f"a stream event of unknown type: {line[:200]!r}")
