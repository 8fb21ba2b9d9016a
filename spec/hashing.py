"""Content hashing: the one place versions come from.

- `stable_hash(value)`: blake2b over canonical JSON, for configs and input lists (the same
  config always gives the same version, whatever the key order).
- `file_digest(path)`: blake2b over a file's bytes, or over every file of a folder with its
  relative name (Hugging Face datasets and model folders are folders).
- `code_hash(*packages)`: blake2b over a package's source files, so editing library code
  makes exactly the assets that run it stale.

Table contents are hashed column by column in `curation.versioning.content_hash`, which needs
pyarrow's buffers; everything else hashes here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from spec.paths import REPO_ROOT

_CHUNK = 1 << 20


def stable_hash(value: Any, length: int = 16) -> str:
    """blake2b over canonical JSON (sorted keys, no whitespace), cut to `length` hex digits.

    >>> stable_hash({"b": 1, "a": [1, 2]}) == stable_hash({"a": [1, 2], "b": 1})
    True
    """
    blob = json.dumps(value, sort_keys=True, default=str, separators=(",", ":")).encode()
    return hashlib.blake2b(blob, digest_size=16).hexdigest()[:length]


def file_digest(path: str | Path) -> str:
    """Content hash of a file, or of every file in a folder (names relative to it, sorted)."""
    path = Path(path)
    h = hashlib.blake2b(digest_size=16)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode())
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                h.update(chunk)
    return h.hexdigest()


_CODE_HASHES: dict[tuple[str, ...], str] = {}


def code_hash(*packages: str) -> str:
    """Hash of the Python sources of the given top-level packages (cached per process)."""
    key = tuple(sorted(packages))
    if key not in _CODE_HASHES:
        h = hashlib.blake2b(digest_size=8)
        for pkg in key:
            for f in sorted((REPO_ROOT / pkg).rglob("*.py")):
                h.update(str(f.relative_to(REPO_ROOT)).encode())
                h.update(f.read_bytes())
        _CODE_HASHES[key] = h.hexdigest()
    return _CODE_HASHES[key]


def code_version(packages: Sequence[str], config: Any) -> str:
    """Code version of a piece of work: the library code it runs + the config slice it reads."""
    return f"{code_hash(*packages)}-{stable_hash(config, 8)}"
