"""Generation cache: every sample ever drawn, keyed by what was asked, append-only.

What: one table `samples`, either in a SQLite file (`samples.sqlite`) under a folder (default
`$CASCADE_HOME/generation_cache`; one machine) or, when the location is a `postgresql://` URL
(the recipe's `storage.backend: postgres`, spec.storage), in that PostgreSQL database, which
workers on several machines write at once (spec.keyed_table holds both backends). A key is
blake2b over (model content version, engine name + `engine.version`, every `Sampling` field,
sample index) and the rendered prompt bytes; the value is the `Sample` (text, token ids,
finish reason, log-probs). Rows are only ever inserted (`INSERT ... ON CONFLICT DO NOTHING`:
the first sample stored under a key stays, whichever process wrote it), never updated.

Why SQLite (WAL) on one machine and not append-only JSONL segments: measured in
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
import sys
from array import array
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from generation.engine import Sample, Sampling
from spec.keyed_table import Column, KeyedTable
from spec.paths import cascade_home
from spec.storage import cache_url, is_postgres_url

KEY_FORMAT = "cascade-gen-v1"
"""Bumped when the key layout changes (old entries then simply stop matching)."""
DB_FILE = "samples.sqlite"
_SWAP = sys.byteorder != "little"

_COLUMNS = [Column("key", "bytes", True), Column("text", "text", True), Column("token_ids", "bytes", True),
            Column("finish_reason", "text", True), Column("logprobs", "bytes"), Column("model", "text"),
            Column("engine", "text")]


def default_cache_dir(home: Path | None = None) -> Path:
    """`<home>/generation_cache`; `home` defaults to `$CASCADE_HOME`."""
    return (home if home is not None else cascade_home()) / "generation_cache"


def default_cache_location(home: Path | None = None) -> str | Path:
    """Where `GenerationCache()` stores: the recipe's PostgreSQL database when `storage.backend`
    is postgres (`$CASCADE_CACHE_URL`, spec.storage), else `default_cache_dir(home)`."""
    return cache_url() or default_cache_dir(home)


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
    """The sample store of one location: a folder (SQLite `samples.sqlite` in it, one machine) or a
    `postgresql://` URL (one PostgreSQL table shared by every machine). None = the default
    (`default_cache_location()`). One connection per object; threads may share it.

    Writes happen in `put_many` only, one transaction per call (call it once per batch): a
    commit is stored when it returns.
    """

    def __init__(self, folder: str | Path | None = None, timeout_s: float = 60.0):
        location = folder if folder is not None else default_cache_location()
        if is_postgres_url(location):
            self.folder, self.path, self.url = None, None, str(location)
        else:
            self.folder, self.url = Path(location), None
            self.folder.mkdir(parents=True, exist_ok=True)
            self.path = self.folder / DB_FILE
        self._table = KeyedTable(self.url or self.path, "samples", _COLUMNS, ["key"], timeout_s=timeout_s)

    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, Sample]:
        """Cached samples of `keys` (absent keys are missing from the result).

        The returned samples carry request_index = sample_index = -1; callers set them.
        """
        found = self._table.get(keys, ["text", "token_ids", "finish_reason", "logprobs"])
        return {key: Sample(-1, -1, text, _unpack(ids, "i"), finish, _unpack(logprobs, "d"))
                for key, (text, ids, finish, logprobs) in found.items()}

    def get_texts(self, keys: Iterable[bytes]) -> dict[bytes, tuple[str, str, int]]:
        """{key: (text, finish_reason, token count)} of cached `keys`: the lookup path of a
        rerun, which needs no token ids (their count is the blob size, nothing is decoded)."""
        found = self._table.get(keys, ["text", "finish_reason", "length(token_ids) / 4"])
        return {key: (text, finish, int(n)) for key, (text, finish, n) in found.items()}

    def put_many(self, items: Mapping[bytes, Sample] | Iterable[tuple[bytes, Sample]],
                 model: str | None = None, engine: str | None = None) -> int:
        """Store samples in one durable transaction; returns how many were new (a key already
        stored keeps its first sample, whichever process or machine wrote it)."""
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        return self._table.insert([(k, s.text, _pack(s.token_ids, "i"), s.finish_reason, _pack(s.logprobs, "d"),
                                    model, engine) for k, s in pairs])

    def __len__(self) -> int:
        return self._table.count()

    def __contains__(self, key: bytes) -> bool:
        return bool(self._table.get([key], ["1"]))

    def close(self) -> None:
        """Close the connection (the data is already stored)."""
        self._table.close()

    def __enter__(self) -> "GenerationCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
