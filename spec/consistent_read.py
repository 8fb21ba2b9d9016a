"""Versions of the bytes actually read: a file (or folder) that changes while it is read fails
the read instead of recording the version of other bytes.

A source's rows and its version must come from the same bytes. Hashing the file in a second
pass after parsing it is not that: a file replaced during the read (an atomic `mv`) got the new
file's version for the old rows, and one rewritten in place (a `cp` over it) a version of
neither, for a silently truncated table.

`read_consistent(path, read, what)` takes the file's state (per file: name, device, inode,
size, mtime and ctime in ns, plus one content digest, `file_state`), runs `read()`, takes the
state again and raises `FileChangedError` ("... changed while it was read (...); rerun when it
is stable") unless both are equal; the version it returns is that digest, the version of the
bytes `read()` saw. Why this design over the others:

* hashing while parsing (one pass, a tee on the byte stream) fits jsonl only: the parquet, `hf`
  (`datasets` save_to_disk) and `hub_parquet` readers hand a *path* to pyarrow / `datasets`,
  which seek (footer first, then column chunks) and memory-map arrow files, so there is no
  single stream to tee, and a user-registered reader may do anything with the path;
* reading into memory first, or parsing a private snapshot copy, bounds nothing (memory) or
  doubles disk and time for a multi-GB dataset folder;
* hash, parse, re-hash streams in fixed chunks (memory stays bounded whatever the size), works
  for any reader, and covers memory maps for the whole parse. It costs two hash passes, the
  second usually from the page cache.

Size and mtime alone are not enough: a rewrite within one clock tick can keep both, so the
content is re-hashed too; the inode (and ctime) catch a replacement by `mv`, even by a file of
the same bytes' length. `file_state` itself stats every file before and after hashing it, so
a change during the hash is caught as well (`spec.hashing.file_digest` is built on it).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

_CHUNK = 1 << 20
T = TypeVar("T")
Stamp = tuple[str, int, int, int, int, int]  # (name, device, inode, size, mtime_ns, ctime_ns)


class FileChangedError(RuntimeError):
    """A file or folder that changed while it was read or hashed."""


@dataclass(frozen=True)
class FileState:
    """What a file (or every file of a folder) looked like: its stat stamps and content digest."""

    stamps: tuple[Stamp, ...]
    """(name, device, inode, size, mtime_ns, ctime_ns) per file, sorted by name."""
    digest: str
    """blake2b-128 over each file's name and bytes (`spec.hashing.file_digest`)."""


def _files(path: Path) -> list[tuple[str, Path]]:
    """(name in the digest, file) of a file, or of every file under a folder (relative names, sorted)."""
    if path.is_dir():
        return [(str(f.relative_to(path)), f) for f in sorted(p for p in path.rglob("*") if p.is_file())]
    return [(path.name, path)]


def _stamp(name: str, file: Path) -> Stamp:
    st = os.stat(file)
    return (name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _stamps(path: Path) -> tuple[Stamp, ...]:
    try:
        return tuple(_stamp(name, f) for name, f in _files(path))
    except FileNotFoundError as err:  # a file listed a moment ago is gone
        raise FileChangedError(f"{path} changed while it was read ({err.filename} vanished)") from None


def file_state(path: str | Path) -> FileState:
    """Stamps and digest of a file or folder; FileChangedError if it changed while being hashed."""
    path = Path(path)
    files = _files(path)
    before = _stamps(path)
    h = hashlib.blake2b(digest_size=16)
    try:
        for name, f in files:
            h.update(name.encode())
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(_CHUNK), b""):
                    h.update(chunk)
    except FileNotFoundError as err:
        raise FileChangedError(f"{path} changed while it was hashed ({err.filename} vanished)") from None
    after = _stamps(path)
    if after != before:
        raise FileChangedError(f"{path} changed while it was hashed ({describe_change(before, after)})")
    return FileState(before, h.hexdigest())


def describe_change(before: tuple[Stamp, ...], after: tuple[Stamp, ...]) -> str:
    """What differs between two stamp tuples, in words (the first few differences)."""
    old, new = {s[0]: s for s in before}, {s[0]: s for s in after}
    notes = [f"{n} appeared" for n in sorted(set(new) - set(old))]
    notes += [f"{n} vanished" for n in sorted(set(old) - set(new))]
    for name in sorted(set(old) & set(new)):
        a, b = old[name], new[name]
        if a[1:3] != b[1:3]:
            notes.append(f"{name} was replaced by another file (inode {a[2]} -> {b[2]})")
        elif a[3] != b[3]:
            notes.append(f"{name} was rewritten ({a[3]} -> {b[3]} bytes)")
        elif a[4:] != b[4:]:
            notes.append(f"{name} was modified")
    return "; ".join(notes[:3]) + (f"; {len(notes) - 3} more" if len(notes) > 3 else "") or "content changed"


def read_consistent(path: str | Path, read: Callable[[], T], what: str) -> tuple[T, str]:
    """(`read()`, the digest of the bytes it read); FileChangedError when `path` changed meanwhile.

    `what` names the file in the message ("source 'math' (/data/math.jsonl)").
    """
    path = Path(path)
    try:
        before = file_state(path)
        result = read()
        after = file_state(path)
    except FileChangedError as err:
        raise FileChangedError(f"{what} changed while it was read ({err}); rerun when it is stable") from None
    if after != before:
        change = describe_change(before.stamps, after.stamps) if after.stamps != before.stamps else "content changed"
        raise FileChangedError(f"{what} changed while it was read ({change}); rerun when it is stable")
    return result, before.digest
