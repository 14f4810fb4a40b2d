"""HTTP over the server's unix socket, or over loopback TCP with a token.

Standard library only: ``http.client`` with a connection class that
connects to a unix socket. One connection per request: the server is
local, a connect costs little, and nothing is shared between threads.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import socket
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .exceptions import InvalidArgumentError, ProtocolError, UnavailableError, from_answer

DEFAULT_SOCKET = "/run/tinyrun/sandbox.sock"
DEFAULT_REQUEST_TIMEOUT = 60.0


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTP/1.1 connection to a unix socket (the Host header says localhost)."""

    def __init__(self, path: str, timeout: float | None = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self.socket_path)
        except BaseException:
            s.close()
            raise
        self.sock = s


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise ProtocolError(f"the server's answer is not JSON: {e}", code="internal", status=self.status) from e


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Connection:
    """Where the server is and how to authenticate to it.

    ``socket``: the unix socket (the server knows the caller by its uid).
    ``url`` and ``token``: ``http://127.0.0.1:PORT`` and the bearer token
    the server's ``--token-file`` holds. Without either, the environment's
    ``TINYRUN_URL`` and ``TINYRUN_TOKEN``, else ``TINYRUN_SOCKET``, else
    ``/run/tinyrun/sandbox.sock``.
    """

    def __init__(
        self,
        socket: str | os.PathLike[str] | None = None,
        url: str | None = None,
        token: str | None = None,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        if socket is not None and url is not None:
            raise InvalidArgumentError("give socket or url, not both", code="bad_request", field="socket")
        if socket is None and url is None:
            url = os.environ.get("TINYRUN_URL") or None
            if url is None:
                socket = os.environ.get("TINYRUN_SOCKET") or DEFAULT_SOCKET
        if url is not None and token is None:
            token = os.environ.get("TINYRUN_TOKEN") or None
        self.request_timeout = request_timeout
        self.socket_path: str | None = os.fspath(socket) if socket is not None else None
        self.token = token
        self._scheme = "unix"
        self._host = ""
        self._port: int | None = None
        if url is not None:
            u = urllib.parse.urlsplit(url)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise InvalidArgumentError(f"url {url!r}: http://HOST:PORT or https://...", field="url")
            if u.path not in ("", "/"):
                raise InvalidArgumentError(f"url {url!r}: the API has no path prefix", field="url")
            # A token sent in clear off the machine is a token given away.
            if u.scheme == "http" and token is not None and not _is_loopback(u.hostname):
                raise InvalidArgumentError(
                    f"url {url!r}: a token is sent over plain http only to a loopback address", field="url"
                )
            self._scheme, self._host, self._port = u.scheme, u.hostname, u.port

    def describe(self) -> str:
        if self._scheme == "unix":
            return f"unix socket {self.socket_path}"
        return f"{self._scheme}://{self._host}:{self._port}"

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._scheme == "unix":
            assert self.socket_path is not None
            return UnixHTTPConnection(self.socket_path, timeout=timeout)
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        h = {"Accept": "application/json", "User-Agent": "tinyrun-python"}
        if self.token is not None:
            h["Authorization"] = f"Bearer {self.token}"
        if extra:
            h.update(extra)
        return h

    @staticmethod
    def _target(path: str, query: Mapping[str, str] | None) -> str:
        return path + ("?" + urllib.parse.urlencode(query) if query else "")

    def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        json_body: Any,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        timeout: float | None,
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        h = self._headers(headers)
        data: bytes | None = body
        if json_body is not None:
            data = json.dumps(json_body).encode()
            h["Content-Type"] = "application/json"
        elif body is not None:
            h.setdefault("Content-Type", "application/octet-stream")
        conn = self._connect(timeout)
        try:
            conn.request(method, self._target(path, query), body=data, headers=h)
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise UnavailableError(f"{method} {path} on {self.describe()}: {e}", code="unavailable") from e

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        json_body: Any = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Answer:
        """One request; an answer of 400 or more is raised as its error."""
        t = self.request_timeout if timeout is None else timeout
        conn, resp = self._send(method, path, query, json_body, body, headers, t)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise UnavailableError(f"{method} {path}: reading the answer: {e}", code="unavailable") from e
        finally:
            conn.close()
        if resp.status >= 400:
            raise from_answer(resp.status, data)
        return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)

    @contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Iterator[http.client.HTTPResponse]:
        """A request whose answer is read as it comes; an error answer is raised before."""
        t = self.request_timeout if timeout is None else timeout
        conn, resp = self._send(method, path, None, json_body, None, headers, t)
        try:
            if resp.status >= 400:
                raise from_answer(resp.status, resp.read())
            yield resp
        finally:
            conn.close()
