"""tinyrun: the Python client of ``tinyrun sandbox serve``.

Throw-away boxes for untrusted code, with the shape of the sandbox SDKs
agent frameworks call::

    from tinyrun import Sandbox

    with Sandbox.create(type="nano", timeout="10m") as sbx:
        sbx.files.write("/tmp/x.py", "print(6 * 7)")
        r = sbx.commands.run("python3 /tmp/x.py", timeout=5)
        print(r.exit_code, r.stdout)

Standard library only; the server is reached over its unix socket, or
over loopback TCP with a bearer token.
"""

from ._http import Connection, UnixHTTPConnection
from .commands import Commands
from .exceptions import (
    AuthenticationError,
    CommandExitError,
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    PolicyError,
    ProtocolError,
    RequestTimeoutError,
    SandboxError,
    TooLargeError,
    UnavailableError,
)
from .files import Files
from .models import CommandResult, EntryInfo, SandboxInfo
from .oneshot import run
from .sandbox import Sandbox

__all__ = [
    "AuthenticationError",
    "CommandExitError",
    "CommandResult",
    "Commands",
    "ConflictError",
    "Connection",
    "EntryInfo",
    "Files",
    "InvalidArgumentError",
    "NotFoundError",
    "PolicyError",
    "ProtocolError",
    "RequestTimeoutError",
    "Sandbox",
    "SandboxError",
    "SandboxInfo",
    "TooLargeError",
    "UnavailableError",
    "UnixHTTPConnection",
    "run",
]
