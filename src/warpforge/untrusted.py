"""Files that someone else wrote into a folder we read: an inbox reply, an outbox job or result.

`open_regular` opens one (and `read_regular` reads one whole) only when it is a regular file, never through a link (O_NOFOLLOW),
never blocking on a FIFO or a device (O_NONBLOCK, then fstat), and never beyond a size limit, so
a reply linked to the user's files or to /dev/zero is refused in one sentence. `write_atomically`
writes through a fresh temporary file (O_EXCL), so a link planted under a predictable temporary
name cannot redirect the write. Neither judges what the file says.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path


class RefusedFile(OSError):
    """The file is not one we read: a link, not a regular file, or larger than the limit."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "refused"


@contextlib.contextmanager
def open_regular(path: str | Path, limit_bytes: int) -> Iterator[int]:
    """A descriptor of the regular file at `path` as opened now: never through a link (O_NOFOLLOW),
    never blocking on a FIFO (O_NONBLOCK, then fstat), never over `limit_bytes`. Swapping the name
    afterwards changes nothing: the descriptor holds the file that was checked. RefusedFile says
    why not ("it is a FIFO, not a regular file"); FileNotFoundError when there is nothing there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(path):
            raise RefusedFile("it is a symbolic link, which is not followed") from None
        raise exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedFile(f"it is {kind(info.st_mode)}, not a regular file")
        if info.st_size > limit_bytes:
            raise RefusedFile(f"it holds {info.st_size} bytes, more than the {limit_bytes} allowed")
        yield fd
    finally:
        os.close(fd)


def kind(mode: int) -> str:
    """What a file that is not a regular one is, in words (from its st_mode)."""
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a symbolic link" if stat.S_ISLNK(mode)
            else "not a regular file")


def read_regular(path: str | Path, limit_bytes: int) -> bytes:
    """The bytes of the regular file at `path` (`open_regular`'s rules); RefusedFile naming the
    path and what to do, FileNotFoundError (an OSError) when there is nothing there."""
    try:
        with open_regular(path, limit_bytes) as fd:
            chunks: list[bytes] = []
            total = 0
            while True:  # read to the end, but never past the limit (a file still growing)
                chunk = os.read(fd, min(1 << 20, limit_bytes + 1 - total))
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                total += len(chunk)
                if total > limit_bytes:
                    raise RefusedFile(f"it holds more than the {limit_bytes} bytes allowed")
    except RefusedFile as exc:
        raise RefusedFile(f"{path}: {exc}: write a plain file there, of at most {limit_bytes} bytes") from None


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
