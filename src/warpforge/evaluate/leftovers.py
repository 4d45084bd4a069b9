"""What a candidate leaves in its folders, handled without trusting it.

A candidate's work folder and private compile cache are host folders it writes as it likes:
trees deeper than Python's recursion limit, FIFOs and links where the harness's files were,
files of any size. `FolderLimit` measures them while it runs (bounded: bytes, entries, depth)
and says when they pass the limit; `remove_tree` removes them afterwards one folder at a time,
never recursing and never raising; `regular_file` opens a file that crosses from a candidate
only when it is a regular file within a size limit, never through a link and never waiting on a
FIFO. What the compile cache keeps of a candidate's folder is compile.py's (`build_products`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from warpforge.untrusted import RefusedFile, kind, open_regular  # noqa: F401  (RefusedFile: what reference.py catches)

log = logging.getLogger(__name__)

# A candidate's folders hold the harness's few files, its outputs and its builds: torch's
# extension builds and Triton's cache are 2-3 levels deep and hold tens of files per kernel.
# Beyond these a folder is not measured further: the candidate is stopped instead.
MAX_DEPTH = 32
MAX_ENTRIES = 10_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def output_file_limit(expected_bytes: int) -> int:
    """The most an outputs file of a task whose outputs take `expected_bytes` may hold: room for a
    wrong dtype (which the comparison names) and torch.save's own records."""
    return int(2.5 * expected_bytes) + (1 << 20)


def refused_output(path: str, expected_bytes: int) -> str | None:
    """Why the candidate's outputs file at `path` is not read (a link, a FIFO or another
    non-regular file, or far bigger than the task's outputs, which take `expected_bytes`), in
    words; None when it may be, or is missing (reading it reports that). The reference process
    checks again on the descriptor it reads from (`regular_file`)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return "the outputs file is a symbolic link, not the file the harness wrote (links are not followed)"
    if not stat.S_ISREG(info.st_mode):
        return f"the outputs file is {kind(info.st_mode)}, not a regular file (the harness wrote a regular file)"
    if info.st_size > output_file_limit(expected_bytes):
        return (f"the outputs file holds {info.st_size / 2**20:.1f} MiB, the task's outputs take "
                f"{expected_bytes / 2**20:.1f} MiB")
    return None


@contextlib.contextmanager
def regular_file(path: str, limit_bytes: int) -> Iterator[str]:
    """A path that names the regular file at `path` as opened now (/proc/self/fd/N), for readers
    that need a path (torch.load with mmap): untrusted.open_regular's rules. Raises RefusedFile."""
    with open_regular(path, limit_bytes) as fd:
        yield f"/proc/self/fd/{fd}"


def usage(root: Path, max_entries: int = MAX_ENTRIES, max_depth: int = MAX_DEPTH) -> tuple[int, int, str | None]:
    """(bytes, entries, problem) under `root`, measured while a candidate may still be changing it:
    one descriptor per level (at most `max_depth`), entries opened relative to their folder and
    never through a link, so neither a long path nor a swapped folder leads anywhere else. Bytes
    are what the files occupy (a sparse file counts what it holds). `problem` says, in words,
    why the count stopped early: a folder deeper than `max_depth`, more than `max_entries`
    entries, or a folder the harness may not read."""
    total = entries = 0
    try:
        top = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        return 0, 0, None
    except OSError as exc:
        return 0, 0, f"it could not be read ({exc.strerror})"
    levels: list[tuple[int, os._ScandirIterator[str]]] = []  # one open folder per level of the path
    try:
        _enter(levels, top)
        while levels:
            fd, listing = levels[-1]
            entry = next(listing, None)
            if entry is None:
                levels.pop()
                os.close(fd)
                listing.close()
                continue
            entries += 1
            if entries > max_entries:
                return total, entries, f"it holds more than {max_entries} files and folders"
            try:
                info = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            total += info.st_blocks * 512
            if not stat.S_ISDIR(info.st_mode):
                continue
            if len(levels) >= max_depth:
                return total, entries, f"it holds folders more than {max_depth} levels deep"
            try:
                _enter(levels, os.open(entry.name, _DIR_FLAGS, dir_fd=fd))
            except FileNotFoundError:
                continue  # gone meanwhile
    except OSError as exc:
        return total, entries, f"it holds a folder the harness may not read ({exc.strerror})"
    finally:
        for fd, listing in levels:
            os.close(fd)
            listing.close()
    return total, entries, None


def _enter(levels: list[tuple[int, os._ScandirIterator[str]]], fd: int) -> None:
    """Add the open folder `fd` to `levels` with its listing (closed again if it cannot be listed)."""
    try:
        levels.append((fd, os.scandir(fd)))
    except OSError:
        os.close(fd)
        raise


class FolderLimit:
    """A candidate's folders may grow by `limit_bytes` beyond what the harness put there when it
    was made (its inputs, the staged cache) and `allowance_bytes` (its outputs files). Call it
    while the candidate runs: the reason, in words, once they are over, else None."""

    def __init__(self, folders: list[Path], limit_bytes: int, allowance_bytes: int, how_to_raise: str) -> None:
        self.folders = folders
        self.limit_bytes = limit_bytes
        self.how_to_raise = how_to_raise
        self.budget = sum(usage(f)[0] for f in folders) + allowance_bytes + limit_bytes

    def __call__(self) -> str | None:
        used, what = 0, "its work folder and compile cache"
        for folder in self.folders:
            size, _, problem = usage(folder)
            if problem:
                return f"{what} broke the harness's limits: {problem}"
            used += size
        if used > self.budget:
            return (f"{what} took more than the {self.limit_bytes / 2**30:.3g} GiB allowed beyond the harness's "
                    f"own files ({self.how_to_raise})")
        return None


def remove_tree(root: Path | str) -> bool:
    """Remove `root` and everything under it, however deep, without recursion: one open folder at a
    time, descending by name and climbing back through "..", never following a link (the
    candidate that made the tree is gone). Folders it made unreadable or unwritable are opened up
    first. Every failure is logged and skipped; never raises. True when all of it is gone."""
    root = str(root)
    try:
        fd = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        return True
    except OSError as exc:
        if os.path.islink(root) or not os.path.isdir(root):
            return _unlink(None, root)
        _fix_mode(root)
        try:
            fd = os.open(root, _DIR_FLAGS)
        except OSError:
            log.warning("could not remove %s: %s", root, exc)
            return False
    names: list[str] = []  # the path from `root` down to the open folder
    stuck: set[tuple[int, int]] = set()  # folders that could not be emptied: not entered again
    clean = True
    while True:
        sub = None
        try:
            os.fchmod(fd, 0o700)  # (its own folder: a candidate may have made it unwritable)
        except OSError:
            pass
        try:
            listing = os.listdir(fd)
        except OSError as exc:
            log.warning("could not list %s: %s", os.path.join(root, *names), exc)
            listing, clean = [], False
        for name in listing:
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISDIR(info.st_mode):
                clean = _unlink(fd, name, os.path.join(root, *names)) and clean
            elif sub is None and (info.st_dev, info.st_ino) not in stuck:
                sub = name
        if sub is not None:
            try:
                child = os.open(sub, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                _fix_mode(sub, fd)
                try:
                    child = os.open(sub, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    log.warning("could not enter %s: %s", os.path.join(root, *names, sub), exc)
                    stuck.add(_identity(sub, fd))
                    clean = False
                    continue
            os.close(fd)
            fd = child
            names.append(sub)
            continue
        if not names:
            os.close(fd)
            try:
                os.rmdir(root)
            except OSError as exc:
                log.warning("could not remove %s: %s", root, exc)
                return False
            return clean
        here = os.fstat(fd)
        try:
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            log.warning("could not climb back out of %s: %s", os.path.join(root, *names), exc)
            os.close(fd)
            return False
        os.close(fd)
        fd = parent
        name = names.pop()
        try:
            os.rmdir(name, dir_fd=fd)
        except OSError as exc:
            log.warning("could not remove %s: %s", os.path.join(root, *names, name), exc)
            stuck.add((here.st_dev, here.st_ino))
            clean = False


def _identity(name: str, fd: int) -> tuple[int, int]:
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return (-1, -1)
    return info.st_dev, info.st_ino


def _unlink(fd: int | None, name: str, where: str = "") -> bool:
    try:
        os.unlink(name, dir_fd=fd)
        return True
    except FileNotFoundError:
        return True
    except OSError as exc:
        log.warning("could not remove %s: %s", os.path.join(where, name), exc)
        return False


def _fix_mode(name: str, fd: int | None = None) -> None:
    """Give a folder of ours back its owner's rights (a candidate may have taken them away)."""
    try:
        os.chmod(name, 0o700, dir_fd=fd)
    except OSError:
        pass
