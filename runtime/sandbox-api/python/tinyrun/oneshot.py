"""``tinyrun.run``: one command in a fresh box that is removed when it
ends (``POST /v1/run``, as ``tinyrun sandbox run --json``)."""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ._http import DEFAULT_REQUEST_TIMEOUT, Connection
from .commands import Duration, Size, argv, env_list, seconds
from .exceptions import CommandExitError
from .models import CommandResult


def run(
    cmd: str | Sequence[str],
    *,
    type: str | None = None,
    image: str | None = None,
    envs: Mapping[str, str] | None = None,
    timeout: Duration | None = None,
    stdin: str | bytes | None = None,
    pool: bool = False,
    output_cap: Size | None = None,
    check: bool = False,
    socket: str | os.PathLike[str] | None = None,
    url: str | None = None,
    token: str | None = None,
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    connection: Connection | None = None,
    **options: Any,
) -> CommandResult:
    """Runs ``cmd`` (a shell command line, or an argument vector) in a new
    box, or a pool's with ``pool=True``, and removes the box. ``timeout``
    is the command's time limit; ``options`` are tinyrun-sandbox(8)'s."""
    conn = connection or Connection(socket=socket, url=url, token=token, request_timeout=request_timeout)
    req: dict[str, Any] = {k: v for k, v in options.items() if v is not None}
    named: dict[str, Any] = {"type": type, "image": image, "timeout": timeout,
                             "env": env_list(envs) if envs else None, "output_cap": output_cap}
    req.update({k: v for k, v in named.items() if v is not None})
    req["command"] = argv(cmd)
    if pool:
        req["pool"] = True
    if isinstance(stdin, str):
        req["stdin"] = stdin
    elif stdin is not None:
        req["stdin_base64"] = base64.b64encode(stdin).decode()
    wait = None if conn.request_timeout is None else conn.request_timeout + seconds(timeout)
    result = CommandResult.parse(conn.request("POST", "/v1/run", json_body=req, timeout=wait).json())
    if check and not result.ok:
        raise CommandExitError(result)
    return result
