"""The client's errors: one base class, a subclass per kind of refusal.

The server answers a refused or failed request with
``{"error": sentence, "code": ..., "field": ...}``; every error raised
for such an answer carries those three and the HTTP status.
"""

from __future__ import annotations

from typing import Any, Protocol


class FinishedCommand(Protocol):
    """What an error says of a finished command (a ``models.CommandResult``,
    named by its shape so that the errors need nothing of the models)."""

    @property
    def error(self) -> str | None: ...
    @property
    def timed_out(self) -> bool: ...
    @property
    def signal(self) -> str | None: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def stdout(self) -> str: ...
    @property
    def stderr(self) -> str: ...


class SandboxError(Exception):
    """A request the server refused or failed, or a server we could not reach.

    ``code`` is the API's error code (``bad_request``, ``forbidden``,
    ``not_found``, ...), ``field`` the request field at fault if the server
    named one, ``status`` the HTTP status (0 when no answer came).
    """

    def __init__(self, message: str, *, code: str = "internal", field: str | None = None, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.field = field
        self.status = status

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        return f"{self.message}{where} [{self.code}]"


class InvalidArgumentError(SandboxError):
    """400: the request was malformed or named an option the server does not know."""


class AuthenticationError(SandboxError):
    """401: no token, or one the server does not hold."""


class PolicyError(SandboxError):
    """403: the request asked for more than the server's policy allows; ``field`` names the option."""


class NotFoundError(SandboxError):
    """404: no such box (or not one of the caller's), file or route."""


class ConflictError(SandboxError):
    """409: the box is not in a state that allows the request."""


class TooLargeError(SandboxError):
    """413: a body or a file over the server's caps."""


class RequestTimeoutError(SandboxError):
    """408: the request (an upload) stalled."""


class UnavailableError(SandboxError):
    """503, or the server could not be reached at all."""


class ProtocolError(SandboxError):
    """The server's answer did not have the shape the API describes."""


class CommandExitError(SandboxError):
    """Raised by ``commands.run(..., check=True)`` when the command did not exit 0."""

    def __init__(self, result: FinishedCommand) -> None:
        if result.error is not None:
            why = result.error
        elif result.timed_out:
            why = "the command timed out"
        elif result.signal is not None:
            why = f"the command was killed by {result.signal}"
        else:
            why = f"the command exited {result.exit_code}"
        super().__init__(why, code="command_failed")
        self.result = result

    @property
    def exit_code(self) -> int | None:
        return self.result.exit_code

    @property
    def stdout(self) -> str:
        return self.result.stdout

    @property
    def stderr(self) -> str:
        return self.result.stderr


_BY_CODE: dict[str, type[SandboxError]] = {
    "bad_request": InvalidArgumentError,
    "unauthorized": AuthenticationError,
    "forbidden": PolicyError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "too_large": TooLargeError,
    "timeout": RequestTimeoutError,
    "unavailable": UnavailableError,
}

_BY_STATUS: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    408: "timeout",
    413: "too_large",
    503: "unavailable",
}


def from_answer(status: int, body: bytes) -> SandboxError:
    """The error an answer with a status of 400 or more stands for."""
    import json

    doc: Any = None
    try:
        doc = json.loads(body)
    except ValueError:
        pass
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        code = doc.get("code")
        if not isinstance(code, str):
            code = _BY_STATUS.get(status, "internal")
        field = doc.get("field")
        cls = _BY_CODE.get(code, SandboxError)
        return cls(doc["error"], code=code, field=field if isinstance(field, str) else None, status=status)
    code = _BY_STATUS.get(status, "internal")
    text = body[:200].decode("utf-8", "replace").strip() or "no body"
    return _BY_CODE.get(code, SandboxError)(f"HTTP {status}: {text}", code=code, status=status)
