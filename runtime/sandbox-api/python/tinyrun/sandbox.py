"""``Sandbox``: one persistent box of ``tinyrun sandbox serve``."""

from __future__ import annotations

import builtins
import os
import urllib.parse
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from ._http import DEFAULT_REQUEST_TIMEOUT, Connection
from .commands import Commands, Duration, OutputHandler, Size, env_list
from .exceptions import InvalidArgumentError, NotFoundError, ProtocolError
from .files import Files
from .models import CommandResult, SandboxInfo

_LANGUAGES = {"python": ["python3", "-c"], "python3": ["python3", "-c"], "sh": ["/bin/sh", "-c"]}


def _connection(
    conn: Connection | None,
    socket: str | os.PathLike[str] | None,
    url: str | None,
    token: str | None,
    request_timeout: float | None,
) -> Connection:
    if conn is not None:
        return conn
    return Connection(socket=socket, url=url, token=token, request_timeout=request_timeout)


class Sandbox:
    """A box that lives until ``kill()``, the end of a ``with`` block, or its lifetime.

    >>> with Sandbox.create(type="nano") as sbx:
    ...     print(sbx.commands.run("echo hi").stdout)
    """

    def __init__(self, sandbox_id: str, conn: Connection) -> None:
        self.sandbox_id = sandbox_id
        self._conn = conn
        self.commands = Commands(conn, sandbox_id)
        self.files = Files(conn, sandbox_id)

    def __repr__(self) -> str:
        return f"Sandbox({self.sandbox_id!r})"

    @property
    def _path(self) -> str:
        return "/v1/boxes/" + urllib.parse.quote(self.sandbox_id, safe="")

    @classmethod
    def create(
        cls,
        type: str | None = None,
        *,
        image: str | None = None,
        envs: Mapping[str, str] | None = None,
        timeout: Duration | None = None,
        idle_timeout: Duration | None = None,
        command_timeout: Duration | None = None,
        memory: Size | None = None,
        cpus: float | None = None,
        pids: int | None = None,
        network: str | None = None,
        allow_host: Sequence[str] | None = None,
        socket: str | os.PathLike[str] | None = None,
        url: str | None = None,
        token: str | None = None,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        connection: Connection | None = None,
        **options: Any,
    ) -> Sandbox:
        """Makes a box (``sandbox launch``).

        ``type``: the preset (nano, micro, ...). ``timeout``: the box's
        lifetime, after which it is removed (as E2B's sandbox timeout;
        ``set_timeout`` changes it). ``command_timeout``: each command's
        default time limit. ``envs``: the box's environment. Durations are
        seconds or strings ("10s", "30m"), sizes bytes or strings ("256M").
        Any other option of tinyrun-sandbox(8) (``user``, ``tmpfs_size``,
        ``dns``, ...) passes through ``options`` with ``-`` written ``_``.
        Where the server is: ``socket``, or ``url`` and ``token``, or the
        environment (see ``Connection``).
        """
        conn = _connection(connection, socket, url, token, request_timeout)
        req: dict[str, Any] = {k: v for k, v in options.items() if v is not None}
        named: dict[str, Any] = {
            "type": type,
            "image": image,
            "lifetime": timeout,
            "idle_timeout": idle_timeout,
            "timeout": command_timeout,
            "memory": memory,
            "cpus": cpus,
            "pids": pids,
            "network": network,
            "allow_host": list(allow_host) if allow_host is not None else None,
            "env": env_list(envs) if envs else None,
        }
        for k in named:
            if k in req:
                raise InvalidArgumentError(f"{k}: pass it by its own name, not in options", field=k)
        req.update({k: v for k, v in named.items() if v is not None})
        info = SandboxInfo.parse(conn.request("POST", "/v1/boxes", json_body=req).json())
        if not info.sandbox_id:
            raise ProtocolError("the server's answer: the new box has no id")
        return cls(info.sandbox_id, conn)

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        *,
        socket: str | os.PathLike[str] | None = None,
        url: str | None = None,
        token: str | None = None,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        connection: Connection | None = None,
    ) -> Sandbox:
        """A handle on an existing box of the caller's (NotFoundError if there is none)."""
        sbx = cls(sandbox_id, _connection(connection, socket, url, token, request_timeout))
        sbx.get_info()
        return sbx

    @staticmethod
    def list(
        *,
        socket: str | os.PathLike[str] | None = None,
        url: str | None = None,
        token: str | None = None,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        connection: Connection | None = None,
    ) -> builtins.list[SandboxInfo]:
        """The caller's boxes (every box, for root on the socket)."""
        conn = _connection(connection, socket, url, token, request_timeout)
        doc = conn.request("GET", "/v1/boxes").json()
        if not isinstance(doc, dict) or not isinstance(doc.get("boxes"), list):
            raise ProtocolError(f"the server's answer: a box list has no boxes (got {str(doc)[:200]})")
        return [SandboxInfo.parse(b) for b in doc["boxes"]]

    def get_info(self) -> SandboxInfo:
        return SandboxInfo.parse(self._conn.request("GET", self._path).json())

    def is_running(self) -> bool:
        try:
            return self.get_info().status == "running"
        except NotFoundError:
            return False

    def set_timeout(self, timeout: Duration) -> SandboxInfo:
        """The box ends ``timeout`` from now (``sandbox extend``); the answer has the new deadline."""
        return SandboxInfo.parse(
            self._conn.request("POST", self._path + "/lifetime", json_body={"lifetime": timeout}).json()
        )

    def kill(self, wait: bool = True) -> bool:
        """Terminates the box; False if it was already gone. With ``wait``
        the call returns once it is, otherwise at once (it is unusable then)."""
        try:
            self._conn.request("DELETE", self._path, query={"wait": "true"} if wait else None)
        except NotFoundError:
            return False
        return True

    def run_code(
        self,
        code: str,
        language: str = "python",
        *,
        timeout: Duration | None = None,
        envs: Mapping[str, str] | None = None,
        on_stdout: OutputHandler | None = None,
        on_stderr: OutputHandler | None = None,
    ) -> CommandResult:
        """Runs ``code`` with ``python3 -c`` (``language="sh"``: ``/bin/sh -c``)."""
        try:
            prefix = _LANGUAGES[language]
        except KeyError:
            raise InvalidArgumentError(
                f"language {language!r}: one of {sorted(_LANGUAGES)}", field="language"
            ) from None
        return self.commands.run(
            [*prefix, code], timeout=timeout, envs=envs, on_stdout=on_stdout, on_stderr=on_stderr
        )

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.kill()
        except Exception:
            # The block's own exception says more than a failed clean-up.
            if exc is None:
                raise
