"""What the API answers, as typed objects, parsed strictly: a field of
the wrong type is a ProtocolError, not a value that surprises later."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from .exceptions import ProtocolError


def _bad(what: str, doc: Any) -> ProtocolError:
    return ProtocolError(f"the server's answer: {what} (got {str(doc)[:200]})")


def _get(doc: dict[str, Any], key: str, typ: type | tuple[type, ...], default: Any, what: str) -> Any:
    v = doc.get(key, default)
    if v is None and default is None:
        return None
    # bool is an int in Python; an int field must not take one.
    if not isinstance(v, typ) or (isinstance(v, bool) and bool not in (typ if isinstance(typ, tuple) else (typ,))):
        raise _bad(f"{what}.{key} is not {typ}", doc)
    return v


def decode_chunk(data: Any, encoding: Any, what: str) -> bytes:
    """The bytes of a text-or-base64 piece of output."""
    if not isinstance(data, str):
        raise _bad(f"{what} has no text", data)
    if encoding in (None, "utf-8"):
        return data.encode("utf-8", "surrogatepass")
    if encoding == "base64":
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as e:
            raise _bad(f"{what} is not base64: {e}", data) from e
    raise _bad(f"{what} has an unknown encoding {encoding!r}", encoding)


def _output(doc: dict[str, Any], key: str) -> tuple[bytes, bool]:
    o = doc.get(key)
    if o is None:
        return b"", False
    if not isinstance(o, dict):
        raise _bad(f"result.{key} is not an object", o)
    truncated = o.get("truncated", False)
    if not isinstance(truncated, bool):
        raise _bad(f"result.{key}.truncated is not a boolean", o)
    return decode_chunk(o.get("text"), o.get("encoding"), f"result.{key}"), truncated


@dataclass(frozen=True)
class CommandResult:
    """A command's outcome: the `--json` result of tinyrun-sandbox(8).

    ``error`` is set when the command could not be run at all (then
    ``exit_code`` is None); ``exit_code`` is None too when a signal
    killed it (``signal``, and ``timed_out`` if the time limit did).
    ``stdout``/``stderr`` are text (undecodable bytes replaced);
    ``stdout_bytes``/``stderr_bytes`` are the bytes.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    error: str | None
    signal: str | None = None
    timed_out: bool = False
    oom_killed: bool = False
    duration_ms: int = 0
    cpu_ms: int = 0
    peak_memory_bytes: int = 0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    refused: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        """The command ran and exited 0."""
        return self.error is None and self.exit_code == 0

    @classmethod
    def parse(cls, doc: Any, stdout: bytes | None = None, stderr: bytes | None = None) -> CommandResult:
        """From the API's SandboxResult; ``stdout``/``stderr``, when given
        (a streamed command's chunks), stand for the result's own."""
        if not isinstance(doc, dict):
            raise _bad("the result is not an object", doc)
        if not isinstance(doc.get("schema_version"), int):
            raise _bad("the result has no schema_version", doc)
        out, out_cut = _output(doc, "stdout")
        err, err_cut = _output(doc, "stderr")
        if stdout is not None:
            out = stdout + out
        if stderr is not None:
            err = stderr + err
        refused = doc.get("refused")
        if refused is not None and not isinstance(refused, dict):
            raise _bad("result.refused is not an object", doc)
        return cls(
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            exit_code=_get(doc, "exit_code", int, None, "result"),
            error=_get(doc, "error", str, None, "result"),
            signal=_get(doc, "signal", str, None, "result"),
            timed_out=_get(doc, "timed_out", bool, False, "result"),
            oom_killed=_get(doc, "oom_killed", bool, False, "result"),
            duration_ms=_get(doc, "duration_ms", int, 0, "result"),
            cpu_ms=_get(doc, "cpu_ms", int, 0, "result"),
            peak_memory_bytes=_get(doc, "peak_memory_bytes", int, 0, "result"),
            stdout_truncated=out_cut,
            stderr_truncated=err_cut,
            stdout_bytes=out,
            stderr_bytes=err,
            refused=refused,
            raw=doc,
        )


@dataclass(frozen=True)
class SandboxInfo:
    """A box as the server lists it."""

    sandbox_id: str
    status: str
    pid: int | None = None
    created: str | None = None
    expires_at: str | None = None
    owner: str | None = None

    @classmethod
    def parse(cls, doc: Any) -> SandboxInfo:
        if not isinstance(doc, dict):
            raise _bad("a box is not an object", doc)
        return cls(
            sandbox_id=_get(doc, "id", str, "", "box"),
            status=_get(doc, "status", str, "", "box"),
            pid=_get(doc, "pid", int, None, "box"),
            created=_get(doc, "created", str, None, "box"),
            expires_at=_get(doc, "expires_at", str, None, "box"),
            owner=_get(doc, "owner", str, None, "box"),
        )


@dataclass(frozen=True)
class EntryInfo:
    """One entry of a directory in the box (``type``: file, dir, symlink or other)."""

    name: str
    type: str
    path: str
    size: int
    mode: int | None = None

    @classmethod
    def parse(cls, doc: Any, parent: str) -> EntryInfo:
        if not isinstance(doc, dict):
            raise _bad("a directory entry is not an object", doc)
        name = _get(doc, "name", str, "", "entry")
        if not name or "/" in name or name in (".", ".."):
            raise _bad("a directory entry has a bad name", doc)
        typ = _get(doc, "type", str, "", "entry")
        return cls(
            name=name,
            type=typ,
            path=parent.rstrip("/") + "/" + name,
            size=_get(doc, "size", int, 0, "entry"),
            mode=_get(doc, "mode", int, None, "entry"),
        )
