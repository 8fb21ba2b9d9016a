"""Reward cache: scores keyed by (completion hash, reward name + version, reference hash).

Reruns of a stage, training, the evals and `cascade verify` on the same rows do not recompute: a
score is looked up by the completion text, the reward's name and `version` (a behaviour change
bumps the version, which invalidates its entries) and a hash of everything else the score
depends on: the prompt and the row's columns (answer, tests, golden patch, ...).

Not cached: infrastructure failures (they should be retried) and rewards whose score
depends on the rest of the batch (`batch_dependent`: group z-scores, batch-minimum
penalties), which pass straight through.

The cache is an optimisation, never a point of failure: a cache file that cannot be opened or
a database error while looking up or storing scores falls back to scoring without it.
Where it lives: `cache_path(setting)` is the one rule the trainer and the evals share (default
`$CASCADE_HOME/reward_cache.sqlite`; "off" disables it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rewards.base import Reward, RewardResult

log = logging.getLogger(__name__)

DEFAULT_CACHE_FILE = "reward_cache.sqlite"
"""File name of the shared cache under $CASCADE_HOME."""
DISABLED = ("off", "none", "")
"""Cache settings that turn the cache off."""


def _digest(value: Any) -> str:
    data = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode()
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class CachedReward(Reward):
    """`reward` with an sqlite cache in front; same name, version and contract."""

    def __init__(self, reward: Reward, cache_path: str | Path):
        self.inner, self.path = reward, Path(cache_path)
        self.name, self.version = reward.name, reward.version
        self.hits = self.misses = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.execute("CREATE TABLE IF NOT EXISTS scores (completion TEXT, reward TEXT, reference TEXT, "
                       "score REAL, reason TEXT, detail TEXT, PRIMARY KEY (completion, reward, reference))")

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")  # concurrent readers while a stage writes
            with db:  # commit on success
                yield db
        finally:
            db.close()

    @property
    def batch_dependent(self) -> bool:
        # A reward whose per-completion score depends on the other completions of its batch says so.
        return bool(getattr(self.inner, "batch_dependent", False))

    def score(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[RewardResult]:
        if self.batch_dependent:
            return self.inner.score(prompts, completions, **columns)
        return super().score(prompts, completions, **columns)

    def _score_batch(self, prompts: list[Any], completions: list[str], columns: dict[str, list]) -> list[RewardResult]:
        rows = [{k: (v[i] if isinstance(v, (list, tuple)) else v) for k, v in sorted(columns.items())}
                for i in range(len(completions))]
        reward_key = f"{self.inner.name}@{self.inner.version}"
        keys = [(_digest(c), reward_key, _digest([prompts[i] if i < len(prompts) else None, rows[i]]))
                for i, c in enumerate(completions)]
        results: list[RewardResult | None] = [None] * len(completions)
        try:
            with self._db() as db:
                for i, key in enumerate(keys):
                    hit = db.execute("SELECT score, reason, detail FROM scores WHERE completion=? AND reward=? "
                                     "AND reference=?", key).fetchone()
                    if hit:
                        results[i] = RewardResult(hit[0], hit[1], False, hit[2])
        except sqlite3.Error as err:  # no cache this time: score everything
            log.warning("reward cache %s unreadable (%s): scoring without it", self.path, err)
            results = [None] * len(completions)
        miss = [i for i, r in enumerate(results) if r is None]
        self.hits += len(completions) - len(miss)
        self.misses += len(miss)
        if miss:
            fresh = self.inner.score([prompts[i] if i < len(prompts) else None for i in miss],
                                     [completions[i] for i in miss],
                                     **{k: [rows[i][k] for i in miss] for k in columns})
            for i, res in zip(miss, fresh):
                results[i] = res
            try:
                with self._db() as db:
                    db.executemany("INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?, ?, ?)",
                                   [(*keys[i], res.score, res.reason, res.detail)
                                    for i, res in zip(miss, fresh) if not res.infra_error])
            except sqlite3.Error as err:
                log.warning("reward cache %s unwritable (%s): scores kept, not cached", self.path, err)
        return [r for r in results if r is not None]


def cached(reward: Reward, cache_path: str | Path) -> CachedReward:
    """Wrap `reward` so scores are looked up in / stored to the sqlite file `cache_path`.

    >>> import tempfile, os
    >>> from rewards.swe import SweReward
    >>> r = cached(SweReward(similarity="lexical"), os.path.join(tempfile.mkdtemp(), "c.sqlite"))
    >>> gold = ["--- a/x\\n+++ b/x\\n@@ -1 +1 @@\\n-a\\n+b\\n"]
    >>> r([None], ["no patch"], golden_patch=gold), r([None], ["no patch"], golden_patch=gold), (r.hits, r.misses)
    ([-1.0], [-1.0], (1, 1))
    """
    return CachedReward(reward, cache_path)


def cache_path(setting: str | os.PathLike | None) -> Path | None:
    """The cache file a setting names: None = `$CASCADE_HOME/reward_cache.sqlite`, "off" (also "" or
    "none", any case) = no cache, anything else = that file.

    >>> cache_path("off") is None, cache_path("/tmp/r.sqlite")
    (True, PosixPath('/tmp/r.sqlite'))
    """
    if setting is None:
        from spec.paths import cascade_home

        return cascade_home() / DEFAULT_CACHE_FILE
    if str(setting).strip().lower() in DISABLED:
        return None
    return Path(setting)


def maybe_cached(reward: Any, path: str | os.PathLike | None) -> Any:
    """`reward` behind the cache file `path`, or `reward` itself when there is nothing to key on.

    Left as is: no path (cache off), a plain function or an object without `score()` and a string
    `name` and `version`, an already cached reward, and a cache file that cannot be opened.
    """
    if path is None or isinstance(reward, CachedReward) or not callable(getattr(reward, "score", None)):
        return reward
    if not (isinstance(getattr(reward, "name", None), str) and isinstance(getattr(reward, "version", None), str)):
        return reward
    try:
        return CachedReward(reward, path)
    except (OSError, sqlite3.Error) as err:
        log.warning("reward cache %s unusable (%s): %s scored without it", path, err, reward.name)
        return reward


__all__ = ["DEFAULT_CACHE_FILE", "CachedReward", "cache_path", "cached", "maybe_cached"]
