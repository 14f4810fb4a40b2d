"""``sandbox.files``: files and directories in and out of a box.

A box is hostile: what comes out of it (a downloaded directory's archive)
is unpacked on the host only as plain directories and regular files, each
name checked to stay inside the destination, which must be new or empty,
so nothing in the archive can reach a path outside it.
"""

from __future__ import annotations

import builtins
import io
import os
import tarfile
import urllib.parse
from typing import IO, TYPE_CHECKING, Literal, overload

from .exceptions import InvalidArgumentError, NotFoundError, ProtocolError
from .models import EntryInfo

if TYPE_CHECKING:
    from ._http import Connection


def _box_path(path: str) -> str:
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
        raise InvalidArgumentError(f"path {path!r}: an absolute path in the box", field="path")
    return path


class Files:
    """The files of one box."""

    def __init__(self, conn: Connection, sandbox_id: str) -> None:
        self._conn = conn
        self._base = f"/v1/boxes/{urllib.parse.quote(sandbox_id, safe='')}"

    def write(self, path: str, data: str | bytes | IO[bytes]) -> None:
        """Writes ``data`` (text is written as UTF-8) to ``path`` in the box."""
        if isinstance(data, str):
            body = data.encode()
        elif isinstance(data, (bytes, bytearray, memoryview)):
            body = bytes(data)
        else:
            body = data.read()
        self._conn.request("PUT", self._base + "/files", query={"path": _box_path(path)}, body=body)

    @overload
    def read(self, path: str, format: Literal["text"] = "text") -> str: ...

    @overload
    def read(self, path: str, format: Literal["bytes"]) -> bytes: ...

    def read(self, path: str, format: Literal["text", "bytes"] = "text") -> str | bytes:
        """The file at ``path`` in the box: text (UTF-8, undecodable bytes
        replaced) or, with ``format="bytes"``, its bytes."""
        if format not in ("text", "bytes"):
            raise InvalidArgumentError(f"format {format!r}: text or bytes", field="format")
        data = self._conn.request("GET", self._base + "/files", query={"path": _box_path(path)}).body
        return data if format == "bytes" else data.decode("utf-8", "replace")

    def list(self, path: str) -> list[EntryInfo]:
        """The entries of the directory ``path`` in the box."""
        doc = self._conn.request("GET", self._base + "/files/list", query={"path": _box_path(path)}).json()
        if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
            raise ProtocolError(f"the server's answer: a listing has no entries (got {str(doc)[:200]})")
        return [EntryInfo.parse(e, path) for e in doc["entries"]]

    def exists(self, path: str) -> bool:
        """Whether ``path`` names an entry in the box."""
        p = _box_path(path).rstrip("/")
        if not p:
            return True
        parent, name = p.rsplit("/", 1)
        try:
            return any(e.name == name for e in self.list(parent or "/"))
        except NotFoundError:
            return False

    def upload_dir(self, local_dir: str | os.PathLike[str], path: str) -> None:
        """Copies the local directory's contents into ``path`` in the box (made if missing)."""
        src = os.fspath(local_dir)
        if not os.path.isdir(src):
            raise InvalidArgumentError(f"local_dir {src!r}: not a directory", field="local_dir")
        buf = io.BytesIO()

        def anonymous(ti: tarfile.TarInfo) -> tarfile.TarInfo:
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            return ti

        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted(os.listdir(src)):
                tar.add(os.path.join(src, name), arcname=name, filter=anonymous)
        self._conn.request(
            "PUT",
            self._base + "/archive",
            query={"path": _box_path(path)},
            body=buf.getvalue(),
            headers={"Content-Type": "application/x-tar"},
        )

    def download_dir(self, path: str, local_dir: str | os.PathLike[str]) -> builtins.list[str]:
        """Copies the directory ``path`` of the box into ``local_dir``, which
        must not exist or be empty. Only directories and regular files are
        written; the names of entries skipped (links, devices) are returned."""
        data = self._conn.request("GET", self._base + "/archive", query={"path": _box_path(path)}).body
        return unpack(data, os.fspath(local_dir))


def _member_parts(name: str) -> list[str]:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or any(p == ".." for p in parts):
        raise ProtocolError(f"the box's archive names {name!r}, outside the directory")
    return parts


def unpack(data: bytes, dest: str) -> list[str]:
    """Unpacks a box's tar archive into ``dest`` (new or empty), writing
    only directories and regular files; returns the names skipped."""
    if os.path.lexists(dest):
        if os.path.islink(dest) or not os.path.isdir(dest) or os.listdir(dest):
            raise InvalidArgumentError(f"local_dir {dest!r}: must not exist or be an empty directory", field="local_dir")
    else:
        os.mkdir(dest, 0o755)
    skipped: list[str] = []
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
    except tarfile.TarError as e:
        raise ProtocolError(f"the box's archive is not a tar archive: {e}") from e
    with tar:
        for m in tar:
            parts = _member_parts(m.name)
            if not parts:
                continue
            target = os.path.join(dest, *parts)
            # Every directory below dest was made here, as a directory: no
            # component can be a link, so the open below stays inside.
            if m.isdir():
                os.makedirs(target, 0o755, exist_ok=True)
            elif m.isreg():
                os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
                f = tar.extractfile(m)
                if f is None:
                    raise ProtocolError(f"the box's archive: {m.name!r} has no data")
                mode = 0o755 if m.mode & 0o111 else 0o644
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
                with os.fdopen(fd, "wb") as out, f:
                    while chunk := f.read(1 << 20):
                        out.write(chunk)
            else:
                skipped.append("/".join(parts))
    return skipped
