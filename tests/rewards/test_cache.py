"""Reward cache: hits, keys (completion, reward version, reference), infra errors not cached —
on both backends: a SQLite file and a PostgreSQL database (a server started by the test,
tests/e2e/servers.py), where two processes score the same rows at once and a database error
falls back to scoring without the cache."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from rewards.base import Reward, RewardResult
from rewards.cache import cache_path, cached, maybe_cached

REPO = Path(__file__).resolve().parents[2]


class CountingReward(Reward):
    """Scores len(completion) == int(answer); counts the completions it really scored."""

    name, version = "counting", "1"

    def __init__(self) -> None:
        self.calls = 0

    def _score_one(self, prompt: Any, completion: str, row: dict[str, Any]) -> RewardResult:
        self.calls += 1
        if completion == "crash":
            raise RuntimeError("verifier down")
        return RewardResult(float(len(completion) == int(row["answer"])), "checked", detail=prompt)


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    """A fresh cache: a SQLite file, or a new PostgreSQL database's URL."""
    if request.param == "sqlite":
        return tmp_path / "cache.sqlite"
    return request.getfixturevalue("postgres").create_database(f"rw_{uuid.uuid4().hex[:12]}")


def test_hits_and_keys(location):
    inner = CountingReward()
    reward = cached(inner, location)
    assert (reward.name, reward.version) == ("counting", "1")
    assert reward(["p", "p"], ["abc", "ab"], answer=["3", "3"]) == [1.0, 0.0]
    assert inner.calls == 2
    # same rows again, in another order and mixed with a new one: only the new one is scored
    res = reward.score(["p", "p", "p"], ["ab", "abcd", "abc"], answer=["3", "4", "3"])
    assert [r.score for r in res] == [0.0, 1.0, 1.0] and inner.calls == 3
    assert res[2].reason == "checked" and res[2].detail == "p"
    # a different reference or prompt is a different key
    reward(["p"], ["abc"], answer=["2"])
    reward(["q"], ["abc"], answer=["3"])
    assert inner.calls == 5
    # a new version of the reward misses; the file survives a new wrapper
    inner.version = "2"
    assert cached(inner, location)(["p"], ["abc"], answer=["3"]) == [1.0]
    assert inner.calls == 6
    inner.version = "1"
    again = cached(inner, location)
    again(["p"], ["abc"], answer=["3"])
    assert inner.calls == 6 and (again.hits, again.misses) == (1, 0)


def test_infra_errors_are_retried(location):
    inner = CountingReward()
    reward = cached(inner, location)
    for _ in range(2):
        [res] = reward.score([None], ["crash"], answer=["5"])
        assert res.infra_error and res.reason == "reward_error"
    assert inner.calls == 2


def test_batch_dependent_rewards_pass_through(tmp_path):
    inner = CountingReward()
    inner.batch_dependent = True
    reward = cached(inner, tmp_path / "c.sqlite")
    reward([None], ["abc"], answer=["3"])
    reward([None], ["abc"], answer=["3"])
    assert inner.calls == 2 and reward.hits == 0


def test_default_location_follows_the_storage_block(tmp_path, monkeypatch, postgres):
    from spec.storage import StorageConfig, use_storage

    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    url = postgres.create_database(f"rw_{uuid.uuid4().hex[:12]}")
    monkeypatch.setenv("CASCADE_POSTGRES_URL", url)
    use_storage(StorageConfig(backend="postgres"))
    try:
        assert cache_path(None) == url and cache_path(url) == url
        reward = maybe_cached(CountingReward(), cache_path(None))
        reward(["p"], ["abc"], answer=["3"])
    finally:
        use_storage(StorageConfig())
    assert cache_path(None) == tmp_path.resolve() / "reward_cache.sqlite"
    assert not list(tmp_path.iterdir())  # the Postgres cache wrote nothing under the home
    inner = CountingReward()
    cached(inner, url)(["p"], ["abc"], answer=["3"])
    assert inner.calls == 0  # stored in Postgres by the first wrapper


def test_database_errors_fall_back_to_scoring(postgres, caplog):
    url = postgres.create_database(f"rw_{uuid.uuid4().hex[:12]}")
    inner = CountingReward()
    reward = cached(inner, url)
    assert reward(["p"], ["abc"], answer=["3"]) == [1.0]
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("DROP TABLE scores")  # every lookup and insert now fails in the database
    with caplog.at_level(logging.WARNING, logger="rewards.cache"):
        assert reward(["p", "p"], ["abc", "ab"], answer=["3", "3"]) == [1.0, 0.0]
    assert inner.calls == 3 and "unreadable" in caplog.text and "unwritable" in caplog.text
    assert "cascade-test-pw" not in caplog.text  # the URL's password is not logged
    # A server that does not answer: the reward is used without a cache.
    dead = f"postgresql://cascade:pw@127.0.0.1:{_closed_port()}/none"
    plain = CountingReward()
    assert maybe_cached(plain, dead) is plain


def _closed_port() -> int:
    from tests.e2e.servers import free_port

    return free_port()


_SCORER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from rewards.base import Reward, RewardResult
    from rewards.cache import cached

    class Tagged(Reward):
        name, version = "tagged", "1"
        def __init__(self, tag):
            self.tag, self.calls = tag, 0
        def _score_one(self, prompt, completion, row):
            self.calls += 1
            return RewardResult(float(self.tag == "a"), self.tag, detail=completion)

    url, tag, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    while not go.exists():  # both open the cache and score at once
        time.sleep(0.01)
    inner = Tagged(tag)
    reward = cached(inner, url)
    completions = [f"c{i}" for i in range(300)]
    order = completions if tag == "a" else completions[::-1]
    for start in range(0, 300, 25):
        chunk = order[start:start + 25]
        reward(["p"] * len(chunk), chunk)
    print(inner.calls)
""")


def test_two_processes_score_the_same_rows_on_postgres(postgres, tmp_path):
    url = postgres.create_database(f"rw_{uuid.uuid4().hex[:12]}")
    go = tmp_path / "go"
    env = os.environ | {"PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", _SCORER, url, tag, str(go)], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for tag in "ab"]
    try:
        go.touch()
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert "unwritable" not in outs[0][1] + outs[1][1]  # no insert failed (no deadlock, no conflict error)
    import psycopg

    with psycopg.connect(url) as db:
        rows = db.execute("SELECT reason, score, detail FROM scores").fetchall()
    assert len(rows) == 300 and len({d for _, _, d in rows}) == 300  # one row per key
    assert all((reason, score) in (("a", 1.0), ("b", 0.0)) for reason, score, _ in rows)  # whole rows
    assert sum(int(out.split()[-1]) for out, _ in outs) >= 300
