"""Reward cache: scores keyed by (completion hash, reward name + version, reference hash).

Reruns of a stage, training, the evals and `cascade verify` on the same rows do not recompute: a
score is looked up by the completion text, the reward's name and `version` (a behaviour change
bumps the version, which invalidates its entries) and a hash of everything else the score
depends on: the prompt and the row's columns (answer, tests, golden patch, ...).

Not cached: infrastructure failures (they should be retried) and rewards whose score
depends on the rest of the batch (`batch_dependent`: group z-scores, batch-minimum
penalties), which pass straight through. The cache is itself a Reward: it calls the inner
reward's `_score_batch` within its own `Reward.score`, so the one failure wrapper
(rewards.base.contain) covers both, and what it stores has passed `rewards.base.checked`.

The cache is an optimisation, never a point of failure: a cache that cannot be opened (a file,
a database server that does not answer) or a database error while looking up or storing
scores falls back to scoring without it.
Where it lives: `cache_path(setting)` is the one rule the trainer and the evals share (default
`$CASCADE_HOME/reward_cache.sqlite`, or the recipe's PostgreSQL database when its
`storage.backend` is postgres (spec.storage); "off" disables it). A path is a SQLite file (one
machine), a `postgresql://` URL a table every machine shares (spec.keyed_table holds both);
scores are only inserted, the first stored under a key stays (`ON CONFLICT DO NOTHING`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from rewards.base import Reward, RewardResult, checked
from spec.keyed_table import Column, KeyedTable, database_errors
from spec.storage import is_postgres_url

log = logging.getLogger(__name__)

DEFAULT_CACHE_FILE = "reward_cache.sqlite"
"""File name of the shared cache under $CASCADE_HOME."""
DISABLED = ("off", "none", "")
"""Cache settings that turn the cache off."""
_COLUMNS = [Column("completion", "text"), Column("reward", "text"), Column("reference", "text"),
            Column("score", "real"), Column("reason", "text"), Column("detail", "text")]


def _digest(value: Any) -> str:
    data = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode()
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class CachedReward(Reward):
    """`reward` with a score cache (SQLite file or PostgreSQL URL) in front; same name, version and contract."""

    def __init__(self, reward: Reward, cache_path: str | Path):
        self.inner = reward
        self.path: str | Path = str(cache_path) if is_postgres_url(str(cache_path)) else Path(cache_path)
        self.name, self.version, self.reads = reward.name, reward.version, reward.reads
        self.hits = self.misses = 0
        self._errors = database_errors(self.path)
        self._table = KeyedTable(self.path, "scores", _COLUMNS, ["completion", "reward", "reference"], timeout_s=30)

    @property
    def batch_dependent(self) -> bool:
        # A reward whose per-completion score depends on the other completions of its batch says so.
        return bool(getattr(self.inner, "batch_dependent", False))

    def _score_batch(self, prompts: list[Any], completions: list[str], columns: dict[str, list]) -> list[RewardResult]:
        if self.batch_dependent:
            return checked(self.inner._score_batch(prompts, completions, columns), len(completions))
        rows = [{k: (v[i] if isinstance(v, (list, tuple)) else v) for k, v in sorted(columns.items())}
                for i in range(len(completions))]
        reward_key = f"{self.inner.name}@{self.inner.version}"
        keys = [(_digest(c), reward_key, _digest([prompts[i] if i < len(prompts) else None, rows[i]]))
                for i, c in enumerate(completions)]
        results: list[RewardResult | None] = [None] * len(completions)
        try:
            hits = self._table.get(keys, ["score", "reason", "detail"])
            for i, key in enumerate(keys):
                if key in hits:
                    score, reason, detail = hits[key]
                    results[i] = RewardResult(score, reason, False, detail)
        except self._errors as err:  # no cache this time: score everything
            log.warning("reward cache %s unreadable (%s): scoring without it", _shown(self.path), err)
            results = [None] * len(completions)
        miss = [i for i, r in enumerate(results) if r is None]
        self.hits += len(completions) - len(miss)
        self.misses += len(miss)
        if miss:
            # The inner reward's own `_score_batch`: this call already runs inside `contain` (Reward.score).
            fresh = checked(self.inner._score_batch([prompts[i] if i < len(prompts) else None for i in miss],
                                                    [completions[i] for i in miss],
                                                    {k: [rows[i][k] for i in miss] for k in columns}), len(miss))
            for i, res in zip(miss, fresh):
                results[i] = res
            try:
                self._table.insert([(*keys[i], res.score, res.reason, res.detail)
                                    for i, res in zip(miss, fresh) if not res.infra_error])
            except self._errors as err:
                log.warning("reward cache %s unwritable (%s): scores kept, not cached", _shown(self.path), err)
        return [r for r in results if r is not None]


def cached(reward: Reward, cache_path: str | Path) -> CachedReward:
    """Wrap `reward` so scores are looked up in / stored to `cache_path` (a SQLite file, or a
    `postgresql://` URL).

    >>> import tempfile, os
    >>> from rewards.swe import SweReward
    >>> r = cached(SweReward(similarity="lexical"), os.path.join(tempfile.mkdtemp(), "c.sqlite"))
    >>> gold = ["--- a/x\\n+++ b/x\\n@@ -1 +1 @@\\n-a\\n+b\\n"]
    >>> r([None], ["no patch"], golden_patch=gold), r([None], ["no patch"], golden_patch=gold), (r.hits, r.misses)
    ([-1.0], [-1.0], (1, 1))
    """
    return CachedReward(reward, cache_path)


def cache_path(setting: str | os.PathLike | None) -> Path | str | None:
    """The cache a setting names: None = the default (the recipe's PostgreSQL URL when its
    `storage.backend` is postgres, `$CASCADE_CACHE_URL`; else `$CASCADE_HOME/reward_cache.sqlite`),
    "off" (also "" or "none", any case) = no cache, a `postgresql://` URL = that database,
    anything else = that file.

    >>> cache_path("off") is None, cache_path("/tmp/r.sqlite")
    (True, PosixPath('/tmp/r.sqlite'))
    """
    if setting is None:
        from spec.paths import cascade_home
        from spec.storage import cache_url

        return cache_url() or cascade_home() / DEFAULT_CACHE_FILE
    if str(setting).strip().lower() in DISABLED:
        return None
    return str(setting) if is_postgres_url(str(setting)) else Path(setting)


def maybe_cached(reward: Any, path: str | os.PathLike | None) -> Any:
    """`reward` behind the cache file `path`, or `reward` itself when there is nothing to key on.

    Left as is: no path (cache off), anything but a Reward with a string `name` and `version`, an
    already cached reward, and a cache file that cannot be opened.
    """
    if path is None or isinstance(reward, CachedReward) or not isinstance(reward, Reward):
        return reward
    if not (isinstance(getattr(reward, "name", None), str) and isinstance(getattr(reward, "version", None), str)):
        return reward
    try:
        return CachedReward(reward, path)
    except (OSError, *database_errors(path)) as err:
        log.warning("reward cache %s unusable (%s): %s scored without it", _shown(path), err, reward.name)
        return reward


def _shown(location: str | os.PathLike) -> str:
    """A cache location fit for a log line: a URL without its password."""
    text = str(location)
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", text) if is_postgres_url(text) else text


__all__ = ["DEFAULT_CACHE_FILE", "CachedReward", "cache_path", "cached", "maybe_cached"]
