"""Files that someone else wrote into a folder we read: an inbox reply, an outbox job or result.

`read_regular` reads one whole only when it is a regular file, never through a link (O_NOFOLLOW),
never blocking on a FIFO or a device (O_NONBLOCK, then fstat), and never beyond a size limit, so
a reply linked to the user's files or to /dev/zero is refused in one sentence. `write_atomically`
writes through a fresh temporary file (O_EXCL), so a link planted under a predictable temporary
name cannot redirect the write. Neither judges what the file says.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


class RefusedFile(OSError):
    """The file is not one we read: a link, not a regular file, or larger than the limit."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "refused"


def read_regular(path: str | Path, limit_bytes: int) -> bytes:
    """The bytes of the regular file at `path` (not followed if it is a link); RefusedFile when it
    is a link, a FIFO, a device or a folder, or holds more than `limit_bytes`; FileNotFoundError
    (an OSError) when there is nothing there."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(path):
            raise RefusedFile(f"{path} is a symbolic link: write the file itself there, not a link") from None
        raise exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedFile(f"{path} is not a regular file (a FIFO, a device or a folder): write a plain file there")
        if info.st_size > limit_bytes:
            raise RefusedFile(f"{path} holds {info.st_size} bytes, more than the {limit_bytes} allowed")
        chunks, total = [], 0
        while True:  # read to the end, but never past the limit (a file still growing)
            chunk = os.read(fd, min(1 << 20, limit_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit_bytes:
                raise RefusedFile(f"{path} holds more than the {limit_bytes} bytes allowed")
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_atomically(path: str | Path, text: str, mode: int = 0o644) -> None:
    """Whole or not at all (a reader never sees half a file): a fresh temporary file beside `path`,
    renamed over it. The rename replaces a link at `path`; it never writes through one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)  # mkstemp's 0600 would survive the rename
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
