"""Generation cache: every sample ever drawn, keyed by what was asked, append-only.

What: one SQLite file (`samples.sqlite`) under a folder (default
`$CASCADE_HOME/generation_cache`). A key is blake2b over (model content version, engine name
+ `engine.version`, every `Sampling` field, sample index) and the rendered prompt bytes; the
value is the `Sample` (text, token ids, finish reason, log-probs). Rows are only ever
inserted (`INSERT OR IGNORE`: the first sample stored under a key stays), never updated.

Why SQLite (WAL) and not append-only JSONL segments: measured in
benchmarks/bench_generation_cache.py (10,000 rows x 2 modes x 2 samples, 2 busy cores): the
whole cached rerun takes ~1.5 s on SQLite, while a JSONL segment needs ~3.5 s just to rebuild
its in-memory index on open (a scan of every record ever written: start-up and memory grow
with the cache's lifetime size) plus ~6 s to decode the records. SQLite's B-tree index
stays on disk (memory flat), it gives concurrent readers and one writer at a time across
processes (its own file locks), and a committed transaction survives `kill -9` (WAL +
synchronous=FULL: the WAL is fsynced at each commit; a torn last commit is ignored on
open), so a killed run loses at most the batch in flight.
Token ids and log-probs are packed little-endian arrays (int32 / float64), not JSON: a
cached rerun decodes 10k samples in milliseconds.

A sample index names "the i-th sample drawn for this request under these settings"; the
engines seed per call, so a cached sample is a valid draw, not a bit-reproducible one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
import sys
from array import array
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from generation.engine import Sample, Sampling
from spec.paths import cascade_home

KEY_FORMAT = "cascade-gen-v1"
"""Bumped when the key layout changes (old entries then simply stop matching)."""
DB_FILE = "samples.sqlite"
_CHUNK = 900  # keys per SELECT (below SQLite's oldest bound-parameter limit)
_SWAP = sys.byteorder != "little"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    key BLOB PRIMARY KEY,
    text TEXT NOT NULL,
    token_ids BLOB NOT NULL,
    finish_reason TEXT NOT NULL,
    logprobs BLOB,
    model TEXT,
    engine TEXT
)"""


def default_cache_dir() -> Path:
    """`$CASCADE_HOME/generation_cache`."""
    return cascade_home() / "generation_cache"


def _sampling_fields(sampling: Sampling) -> dict:
    return dataclasses.asdict(sampling)  # every field: a new Sampling field changes keys by itself


class KeySpace:
    """Keys of one (model, engine, sampling) setting; `key(prompt, i)` hashes only what varies."""

    def __init__(self, model_version: str, engine_name: str, engine_version: str, sampling: Sampling):
        self.model_version, self.engine = model_version, f"{engine_name}@{engine_version}"
        head = json.dumps([KEY_FORMAT, model_version, engine_name, engine_version, _sampling_fields(sampling)],
                          sort_keys=True, separators=(",", ":"))
        self._base = hashlib.blake2b(head.encode() + b"\0", digest_size=16)

    def prompt_hasher(self, prompt: str) -> "hashlib._Hash":
        """The state after the prompt (length-prefixed, so prompt and index cannot run together)."""
        h = self._base.copy()
        data = prompt.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
        return h

    def keys(self, prompt: str, samples: Sequence[int]) -> list[bytes]:
        """Keys of sample indices `samples` of a rendered prompt."""
        h = self.prompt_hasher(prompt)
        out = []
        for i in samples:
            k = h.copy()
            k.update(i.to_bytes(8, "little"))
            out.append(k.digest())
        return out

    def key(self, prompt: str, sample_index: int) -> bytes:
        """Key of one sample of a rendered prompt."""
        return self.keys(prompt, [sample_index])[0]


def sample_key(model_version: str, engine_name: str, engine_version: str, prompt: str,
               sampling: Sampling, sample_index: int) -> bytes:
    """The cache key of one sample (16 bytes)."""
    return KeySpace(model_version, engine_name, engine_version, sampling).key(prompt, sample_index)


def _pack(values: Sequence[int] | Sequence[float] | None, code: str) -> bytes | None:
    if values is None:
        return None
    arr = array(code, values)
    if _SWAP:
        arr.byteswap()
    return arr.tobytes()


def _unpack(blob: bytes | None, code: str) -> list | None:
    if blob is None:
        return None
    arr = array(code)
    arr.frombytes(blob)
    if _SWAP:
        arr.byteswap()
    return arr.tolist()


class GenerationCache:
    """The sample store of one folder. One connection per object; use one object per thread.

    Writes happen in `put_many` only, one transaction per call (call it once per batch): a
    commit is on disk when it returns.
    """

    def __init__(self, folder: str | Path | None = None, timeout_s: float = 60.0):
        self.folder = Path(folder) if folder is not None else default_cache_dir()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / DB_FILE
        self._db = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")  # readers never block the writer, nor it them
        self._db.execute("PRAGMA synchronous=FULL")  # fsync the WAL at every commit
        self._db.execute(_SCHEMA)

    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, Sample]:
        """Cached samples of `keys` (absent keys are missing from the result).

        The returned samples carry request_index = sample_index = -1; callers set them.
        """
        keys = list(dict.fromkeys(keys))
        out: dict[bytes, Sample] = {}
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start:start + _CHUNK]
            query = ("SELECT key, text, token_ids, finish_reason, logprobs FROM samples WHERE key IN "
                     f"({','.join('?' * len(chunk))})")
            for key, text, ids, finish, logprobs in self._db.execute(query, chunk):
                out[key] = Sample(-1, -1, text, _unpack(ids, "i"), finish, _unpack(logprobs, "d"))
        return out

    def get_texts(self, keys: Iterable[bytes]) -> dict[bytes, tuple[str, str, int]]:
        """{key: (text, finish_reason, token count)} of cached `keys`: the lookup path of a
        rerun, which needs no token ids (their count is the blob size, nothing is decoded)."""
        keys = list(dict.fromkeys(keys))
        out: dict[bytes, tuple[str, str, int]] = {}
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start:start + _CHUNK]
            query = ("SELECT key, text, finish_reason, length(token_ids) / 4 FROM samples WHERE key IN "
                     f"({','.join('?' * len(chunk))})")
            for key, text, finish, n in self._db.execute(query, chunk):
                out[key] = (text, finish, n)
        return out

    def put_many(self, items: Mapping[bytes, Sample] | Iterable[tuple[bytes, Sample]],
                 model: str | None = None, engine: str | None = None) -> int:
        """Store samples in one durable transaction; returns how many were new."""
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        if not pairs:
            return 0
        rows = [(k, s.text, _pack(s.token_ids, "i"), s.finish_reason, _pack(s.logprobs, "d"), model, engine)
                for k, s in pairs]
        before = self._db.total_changes
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany("INSERT OR IGNORE INTO samples VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return self._db.total_changes - before

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM samples").fetchone()[0])

    def __contains__(self, key: bytes) -> bool:
        return self._db.execute("SELECT 1 FROM samples WHERE key = ?", (key,)).fetchone() is not None

    def close(self) -> None:
        """Close the connection (the data is already on disk)."""
        self._db.close()

    def __enter__(self) -> "GenerationCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
