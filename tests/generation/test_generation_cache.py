"""The generation cache: keys cover every component, samples round-trip, a torn write or a
killed writer loses at most the batch in flight, and a rerun generates only what is missing;
the same on PostgreSQL (a server started by the test, tests/e2e/servers.py), where two writer
processes store the same keys at once and each key keeps one whole first row.

(Named test_generation_cache.py: tests/rewards/test_cache.py already owns the basename.)
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from fake_engine import FakeEngine

from generation.cache import DB_FILE, GenerationCache, KeySpace, default_cache_dir, sample_key
from generation.engine import Sample, Sampling
from generation.pipeline import GenerationStats, generate_rows

REPO = Path(__file__).resolve().parents[2]


def _sample(text: str = "hi", n: int = 3) -> Sample:
    return Sample(-1, -1, text, list(range(n)), "stop", None)


def test_key_covers_every_component() -> None:
    base = dict(model_version="m1", engine_name="hf", engine_version="v1", prompt="p", sampling=Sampling(),
                sample_index=0)
    variants = [base]
    variants += [base | {"model_version": "m2"}, base | {"engine_name": "vllm"}, base | {"engine_version": "v2"},
                 base | {"prompt": "p "}, base | {"sample_index": 1}]
    for f in dataclasses.fields(Sampling):  # every Sampling field, present and future
        value = getattr(Sampling(), f.name)
        changed = (not value) if isinstance(value, bool) else value + 1
        variants.append(base | {"sampling": dataclasses.replace(Sampling(), **{f.name: changed})})
    keys = [sample_key(**v) for v in variants]
    assert len(set(keys)) == len(keys) == 6 + len(dataclasses.fields(Sampling))
    assert all(len(k) == 16 for k in keys)
    assert sample_key(**base) == sample_key(**base)  # stable
    space = KeySpace("m1", "hf", "v1", Sampling())
    assert space.keys("p", [0, 1]) == [sample_key(**base), sample_key(**(base | {"sample_index": 1}))]


def test_roundtrip_append_only_and_default_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    assert default_cache_dir() == (tmp_path / "home" / "generation_cache").resolve()
    with GenerationCache() as cache:
        assert cache.folder == default_cache_dir()
    s = Sample(0, 0, "héllo <think>", [1, 2, 70000, 2**31 - 1], "length", [-0.1, -2.5e-9, 0.0, -30.0])
    with GenerationCache(tmp_path / "c") as cache:
        assert cache.put_many({b"k" * 16: s, b"j" * 16: _sample()}) == 2
        assert cache.put_many({b"k" * 16: _sample("other")}) == 0  # first write wins, never updated
        got = cache.get_many([b"k" * 16, b"missing" + b"\0" * 9])
        assert list(got) == [b"k" * 16]
        g = got[b"k" * 16]
        assert (g.text, g.token_ids, g.finish_reason, g.logprobs) == (s.text, s.token_ids, s.finish_reason, s.logprobs)
        assert cache.get_texts([b"k" * 16]) == {b"k" * 16: ("héllo <think>", "length", 4)}
        assert len(cache) == 2 and b"j" * 16 in cache


def test_concurrent_reader_sees_committed_batches(tmp_path: Path) -> None:
    with GenerationCache(tmp_path) as writer, GenerationCache(tmp_path) as reader:
        assert reader.get_many([b"a" * 16]) == {}
        writer.put_many({b"a" * 16: _sample()})
        assert list(reader.get_many([b"a" * 16])) == [b"a" * 16]


def test_torn_last_write_recovers_to_last_committed_batch(tmp_path: Path) -> None:
    src = tmp_path / "src"
    cache = GenerationCache(src)  # kept open: the WAL is not checkpointed into the main file
    cache.put_many({bytes([i]) * 16: _sample(f"a{i}", 50) for i in range(20)})
    cache.put_many({bytes([100 + i]) * 16: _sample(f"b{i}", 50) for i in range(20)})
    wal = src / f"{DB_FILE}-wal"
    assert wal.stat().st_size > 0
    for name, mutate in (("torn", lambda b: b[: len(b) - 700]), ("garbage", lambda b: b + os.urandom(3000))):
        dst = tmp_path / name
        dst.mkdir()
        shutil.copy(src / DB_FILE, dst / DB_FILE)
        (dst / f"{DB_FILE}-wal").write_bytes(mutate(wal.read_bytes()))  # a partial / corrupt last record
        with GenerationCache(dst) as reopened:
            first = reopened.get_many(bytes([i]) * 16 for i in range(20))
            second = reopened.get_many(bytes([100 + i]) * 16 for i in range(20))
            assert len(first) == 20  # every earlier batch survives
            assert len(second) in ((0,) if name == "torn" else (20,))  # the torn batch is all or nothing
            reopened.put_many({b"z" * 16: _sample()})  # and the cache keeps working
    cache.close()


_WRITER = textwrap.dedent("""
    import sys
    from fake_engine import FakeEngine
    from generation.cache import GenerationCache
    from generation.engine import Sampling
    from generation.pipeline import generate_rows
    rows = [{"row_id": f"r{i}", "prompt": f"question {i}"} for i in range(40)]
    with GenerationCache(sys.argv[1]) as cache:
        for _ in generate_rows(FakeEngine(delay_s=0.15), "m", rows, ("think",), 3, Sampling(), cache, batch_size=2):
            pass
""")


def test_killed_writer_then_rerun_generates_only_missing(tmp_path: Path) -> None:
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(REPO), str(Path(__file__).parent)])}
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (tmp_path / DB_FILE).exists():
                with GenerationCache(tmp_path) as probe:
                    if len(probe) >= 12:  # a few batches are on disk, the run is mid-way
                        break
            assert proc.poll() is None, "writer finished before it could be killed"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    with GenerationCache(tmp_path) as cache:
        before = len(cache)
        assert 12 <= before < 120 and before % 6 == 0  # whole batches only (2 rows x 3 samples)
        engine, stats = FakeEngine(), GenerationStats()
        rows = [{"row_id": f"r{i}", "prompt": f"question {i}"} for i in range(40)]
        records = list(generate_rows(engine, "m", rows, ("think",), 3, Sampling(), cache, batch_size=2, stats=stats))
        assert len(records) == 120 and len(cache) == 120
        assert engine.samples == stats.generated == 120 - before
        assert stats.cached == before == sum(r.cached for r in records)
        again = FakeEngine()
        list(generate_rows(again, "m", rows, ("think",), 3, Sampling(), cache, batch_size=2))
        assert again.calls == 0


# -- the same cache on PostgreSQL (several machines): a server started here, stopped by PID ------

@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    """A fresh cache location: a folder (SQLite) or a new PostgreSQL database's URL."""
    if request.param == "sqlite":
        return tmp_path / "cache"
    return request.getfixturevalue("postgres").create_database(f"gen_{uuid.uuid4().hex[:12]}")


def test_both_backends_roundtrip_first_writer_wins(location: str | Path) -> None:
    s = Sample(0, 0, "héllo <think>", [1, 2, 70000, 2**31 - 1], "length", [-0.1, -2.5e-9, 0.0, -30.0])
    with GenerationCache(location) as cache, GenerationCache(location) as reader:
        assert (cache.url is not None) == isinstance(location, str)
        assert cache.put_many({b"k" * 16: s, b"j" * 16: _sample()}, model="m", engine="hf@1") == 2
        assert cache.put_many({b"k" * 16: _sample("other"), b"i" * 16: _sample()}) == 1  # never updated
        got = reader.get_many([b"k" * 16, b"missing" + b"\0" * 9])
        assert list(got) == [b"k" * 16]
        g = got[b"k" * 16]
        assert (g.text, g.token_ids, g.finish_reason, g.logprobs) == (s.text, s.token_ids, s.finish_reason, s.logprobs)
        assert reader.get_texts([b"k" * 16, b"j" * 16]) == {b"k" * 16: ("héllo <think>", "length", 4),
                                                            b"j" * 16: ("hi", "stop", 3)}
        assert len(reader) == 3 and b"i" * 16 in reader and b"x" * 16 not in reader
        many = {i.to_bytes(16, "big"): _sample(str(i)) for i in range(2000)}  # more keys than one lookup
        assert cache.put_many(many) == 2000
        assert {k: v.text for k, v in reader.get_many(many).items()} == {k: v.text for k, v in many.items()}


def test_default_location_follows_the_storage_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    postgres) -> None:
    from spec.storage import StorageConfig, use_storage

    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    url = postgres.create_database(f"gen_{uuid.uuid4().hex[:12]}")
    monkeypatch.setenv("MY_PG", url)
    use_storage(StorageConfig(backend="postgres", url_env="MY_PG"))
    try:
        with GenerationCache() as cache:
            assert (cache.url, cache.path) == (url, None)
            cache.put_many({b"p" * 16: _sample()})
    finally:
        use_storage(StorageConfig())  # embedded: back to the SQLite folder under the home
        assert not (tmp_path / "home" / "generation_cache").exists()  # nothing of it under the home
    with GenerationCache() as cache:
        assert cache.path == default_cache_dir() / DB_FILE and len(cache) == 0


_PG_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from generation.cache import GenerationCache
    from generation.engine import Sample
    url, tag, go, step = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    while not go.exists():  # both start together: opening (creating the table) and writing at once
        time.sleep(0.01)
    order = range(0, 600, step) if tag == "a" else reversed(range(0, 600, step))
    new = 0
    with GenerationCache(url) as cache:
        for start in order:
            batch = {i.to_bytes(16, "big"): Sample(-1, -1, f"{tag}{i}", [i, ord(tag)], "stop", None)
                     for i in range(start, min(start + step, 600))}
            new += cache.put_many(batch, model=tag)
    print(new)
""")


def test_two_processes_write_the_same_keys_on_postgres(postgres, tmp_path: Path) -> None:
    """Two writer processes (two machines' workers) insert the same 600 keys at once, in opposite
    orders and other batch sizes: every key is stored once, whole, from one writer."""
    url = postgres.create_database(f"gen_{uuid.uuid4().hex[:12]}")
    go = tmp_path / "go"
    env = os.environ | {"PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", _PG_WRITER, url, tag, str(go), step], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, text=True) for tag, step in (("a", "20"), ("b", "17"))]
    try:
        go.touch()
        outs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sum(int(o.split()[-1]) for o in outs) == 600  # each key inserted by exactly one of them
    with GenerationCache(url) as cache:
        assert len(cache) == 600
        got = cache.get_many(i.to_bytes(16, "big") for i in range(600))
    assert len(got) == 600
    for i in range(600):
        s = got[i.to_bytes(16, "big")]
        assert s.text in (f"a{i}", f"b{i}") and s.token_ids == [i, ord(s.text[0])]  # one writer's whole row
