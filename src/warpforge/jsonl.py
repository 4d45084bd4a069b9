"""JSON-lines files written as results arrive: append one record durably, read back what a crash
left (a last line cut short is skipped: its work is redone), or write a whole file atomically."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def read(path: str | Path) -> list[dict[str, Any]]:
    """Every record that parses; [] when the file does not exist yet. A name ending in .gz is
    read through gzip (records committed compressed)."""
    p = Path(path)
    if not p.is_file():
        return []
    text = gzip.decompress(p.read_bytes()).decode() if p.name.endswith(".gz") else p.read_text()
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # cut short by a crash
    return out


def append(path: str | Path, rows: Iterable[dict[str, Any]]) -> int:
    """Append records and fsync; a line left unfinished by a crash does not swallow the first."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    with open(p, "a+b") as f:
        f.seek(0, os.SEEK_END)
        if f.tell():
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return data.count(b"\n")


def write(path: str | Path, rows: Iterable[dict[str, Any]]) -> int:
    """The whole file or nothing (temp file + rename)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) + "\n" for r in rows]
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text("".join(lines))
    os.replace(tmp, p)
    return len(lines)
