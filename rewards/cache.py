"""Reward cache: scores keyed by (completion hash, reward name + version, reference hash).

Reruns of a stage, audits and `cascade verify` on the same rows do not recompute: a score
is looked up by the completion text, the reward's name and `version` (a behaviour change
bumps the version, which invalidates its entries) and a hash of everything else the score
depends on: the prompt and the row's reference columns (answer, tests, golden patch, ...).

Not cached: infrastructure failures (they should be retried) and rewards whose score
depends on the rest of the batch (`batch_dependent`: group z-scores, batch-minimum
penalties), which pass straight through.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any, Sequence

from rewards.base import Reward, RewardResult


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
        with self._connect() as db:
            db.execute("CREATE TABLE IF NOT EXISTS scores (completion TEXT, reward TEXT, reference TEXT, "
                       "score REAL, reason TEXT, detail TEXT, PRIMARY KEY (completion, reward, reference))")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30)
        db.execute("PRAGMA journal_mode=WAL")  # concurrent readers while a stage writes
        return db

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
        with self._connect() as db:
            for i, key in enumerate(keys):
                hit = db.execute("SELECT score, reason, detail FROM scores WHERE completion=? AND reward=? AND reference=?", key).fetchone()
                if hit:
                    results[i] = RewardResult(hit[0], hit[1], False, hit[2])
        miss = [i for i, r in enumerate(results) if r is None]
        self.hits += len(completions) - len(miss)
        self.misses += len(miss)
        if miss:
            fresh = self.inner.score([prompts[i] if i < len(prompts) else None for i in miss],
                                     [completions[i] for i in miss],
                                     **{k: [rows[i][k] for i in miss] for k in columns})
            with self._connect() as db:
                for i, res in zip(miss, fresh):
                    results[i] = res
                    if not res.infra_error:
                        db.execute("INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?, ?, ?)", (*keys[i], res.score, res.reason, res.detail))
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


__all__ = ["CachedReward", "cached"]
