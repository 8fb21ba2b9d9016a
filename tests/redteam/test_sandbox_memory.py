"""Red team: memory is limited per run, for the whole process tree, and rlimits cannot be raised.

Each memory attack runs under both guards where this machine has a working memory cgroup
(`cgroup`: the kernel's limit; `watchdog`: the fallback, forced with
CASCADE_SANDBOX_MEMORY_GUARD=watchdog). A sampler thread reads /proc every 2 ms during the run
and records, per slot uid, the largest sum of the processes' anonymous + shared-memory RSS it
saw: that is what the host paid, and it must stay under the limit plus a margin.
"""

from __future__ import annotations

import json
import os
import textwrap
import threading

import pytest

from sandboxes.core import run_python, sandbox_available
from sandboxes.limits import SandboxLimits, SandboxResult
from sandboxes.memory import GUARD_ENV, guard_kind
from sandboxes.slots import NUM_SLOTS, UID_BASE, pids_of_uid

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="sandbox needs root + bubblewrap (scripts/setup.sh)")

LIMIT_MB = 1024
MARGIN = 1.25  # the host may see at most the limit + 25 %


class PeakSampler:
    """Largest total memory (RssAnon + RssShmem) per slot uid, sampled from /proc while a run goes on."""

    def __init__(self, interval_s: float = 0.002) -> None:
        self.interval_s = interval_s
        self.peak: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        totals: dict[int, int] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/status", "rb") as fh:
                    fields = dict(line.split(b":", 1) for line in fh.read().splitlines() if b":" in line)
                uid = int(fields[b"Uid"].split()[0])
                # Memory the process itself holds (anonymous + shared memory), not the library
                # files every Python maps: those are the same pages in every process.
                held = sum(int(fields.get(key, b"0 kB").split()[0]) << 10 for key in (b"RssAnon", b"RssShmem"))
            except (OSError, KeyError, ValueError):
                continue
            if UID_BASE <= uid < UID_BASE + NUM_SLOTS:
                totals[uid] = totals.get(uid, 0) + held
        for uid, total in totals.items():
            self.peak[uid] = max(self.peak.get(uid, 0), total)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "PeakSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def peak_mb(self, uid: int | None) -> float:
        return self.peak.get(uid, 0) / (1 << 20)


@pytest.fixture(params=["cgroup", "watchdog"])
def guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The memory guard under test: the kernel's cgroup, or the watchdog fallback."""
    if request.param == "cgroup":
        if guard_kind() == "watchdog":
            pytest.skip("no working memory cgroup on this machine: the watchdog case covers it")
        monkeypatch.setenv(GUARD_ENV, "auto")
    else:
        monkeypatch.setenv(GUARD_ENV, "watchdog")
    return request.param


def run_sampled(code: str, limits: SandboxLimits) -> tuple[SandboxResult, float]:
    with PeakSampler() as sampler:
        result = run_python(code, limits=limits)
    assert result.uid is not None and pids_of_uid(result.uid) == [], "processes left behind"
    return result, sampler.peak_mb(result.uid)


def assert_contained(result: SandboxResult, host_peak_mb: float, guard: str) -> None:
    assert result.status == "memory_limit", result
    assert f"{LIMIT_MB} MiB" in result.detail, result.detail
    assert host_peak_mb < LIMIT_MB * MARGIN, f"host saw {host_peak_mb:.0f} MiB"
    assert result.memory_peak_mb is not None and result.memory_peak_mb < LIMIT_MB * MARGIN, result.memory_peak_mb


FORK_8_X_600 = textwrap.dedent("""\
    import os, time
    children = []
    for _ in range(8):
        pid = os.fork()
        if pid == 0:
            block = bytearray(600 << 20)  # zero-filled: every page touched
            time.sleep(3)
            os._exit(0)
        children.append(pid)
    codes = [os.waitpid(pid, 0)[1] for pid in children]
    print("all children allocated" if not any(codes) else f"children failed: {codes}")""")


@pytest.mark.slow
def test_forked_children_share_one_limit(guard: str) -> None:
    """8 forked children touch 600 MiB each (4.7 GiB) under a 1 GiB run limit: the run ends memory_limit and the host never holds more than the limit + 25 %."""
    result, peak = run_sampled(FORK_8_X_600, SandboxLimits(timeout_s=15, memory_mb=LIMIT_MB))
    assert_contained(result, peak, guard)
    assert "all children allocated" not in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("address_space_mb", [None, 8192], ids=["rlimit_as", "guard_only"])
def test_one_huge_allocation(guard: str, address_space_mb: int | None) -> None:
    """One process allocates 2 GiB at once under a 1 GiB limit: memory_limit, whether the per-process RLIMIT_AS or (with RLIMIT_AS lifted) the run's guard stops it."""
    limits = SandboxLimits(timeout_s=15, memory_mb=LIMIT_MB, address_space_mb=address_space_mb)
    result, peak = run_sampled("block = bytearray(2 << 30)\nprint('allocated')", limits)
    assert result.status == "memory_limit" and "allocated" not in result.stdout, result
    assert peak < LIMIT_MB * MARGIN, f"host saw {peak:.0f} MiB"


THREADS_4_X_400 = textwrap.dedent("""\
    import threading, time
    failures, blocks = [], []
    def grab():
        try:
            blocks.append(bytearray(400 << 20))
            time.sleep(2)
        except MemoryError as err:
            failures.append(err)
    threads = [threading.Thread(target=grab) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise MemoryError(f"{len(failures)} of 4 threads could not allocate")
    print("4 x 400 MiB allocated")""")


@pytest.mark.slow
@pytest.mark.parametrize("address_space_mb", [None, 8192], ids=["rlimit_as", "guard_only"])
def test_threads_count_toward_the_same_limit(guard: str, address_space_mb: int | None) -> None:
    """4 threads of one process hold 400 MiB each (1.6 GiB) under a 1 GiB limit: they cannot all get it, the run ends memory_limit, the host stays under the limit + 25 %."""
    limits = SandboxLimits(timeout_s=15, memory_mb=LIMIT_MB, address_space_mb=address_space_mb)
    result, peak = run_sampled(THREADS_4_X_400, limits)
    assert result.status == "memory_limit" and "allocated" not in result.stdout, result
    assert peak < LIMIT_MB * MARGIN, f"host saw {peak:.0f} MiB"


@pytest.mark.slow
def test_normal_programs_are_not_false_positives(guard: str) -> None:
    """A program using 200 MiB, and one sharing 400 MiB with 2 forked readers (RSS sum 1.2 GiB, real use 0.4 GiB), under 1 GiB: both ok."""
    plain, _ = run_sampled("block = bytearray(200 << 20)\nprint(len(block) >> 20)", SandboxLimits(memory_mb=LIMIT_MB))
    assert (plain.status, plain.stdout) == ("ok", "200\n"), plain
    shared = textwrap.dedent("""\
        import os, time
        block = bytearray(400 << 20)
        pids = []
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                total = sum(block[::1 << 20])  # reads every MiB: shared pages, nothing copied
                time.sleep(1)
                os._exit(total)
            pids.append(pid)
        print([os.waitpid(pid, 0)[1] for pid in pids])""")
    result, _ = run_sampled(shared, SandboxLimits(timeout_s=15, memory_mb=LIMIT_MB))
    assert (result.status, result.stdout) == ("ok", "[0, 0]\n"), result


RAISE_LIMITS = textwrap.dedent("""\
    import json, resource
    names = [n for n in dir(resource) if n.startswith("RLIMIT_")]
    before = {n: resource.getrlimit(getattr(resource, n)) for n in names}
    attempts = {}
    for name in ("RLIMIT_STACK", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_DATA", "RLIMIT_NOFILE", "RLIMIT_FSIZE"):
        res = getattr(resource, name)
        soft, hard = resource.getrlimit(res)
        for label, new in (("soft_to_infinity", (resource.RLIM_INFINITY, hard)),
                           ("hard_to_infinity", (soft, resource.RLIM_INFINITY)),
                           ("both_doubled", (soft * 2, hard * 2))):
            try:
                resource.setrlimit(res, new)
                attempts[f"{name}.{label}"] = "raised"
            except (ValueError, OSError) as err:
                attempts[f"{name}.{label}"] = f"refused: {err}"
    after = {n: resource.getrlimit(getattr(resource, n)) for n in names}
    print(json.dumps({"before": before, "attempts": attempts, "after": after}))""")


def test_rlimits_cannot_be_raised() -> None:
    """A program calls setrlimit to raise STACK, AS, NPROC, DATA, NOFILE, FSIZE (soft, hard, both): every attempt is refused, nothing changes, every limit has soft = hard except CPU."""
    result = run_python(RAISE_LIMITS, limits=SandboxLimits(timeout_s=5))
    assert result.status == "ok", result
    seen = json.loads(result.stdout)
    raised = {k: v for k, v in seen["attempts"].items() if not v.startswith("refused")}
    assert raised == {}, raised
    assert seen["after"] == seen["before"]
    unpinned = {n: v for n, v in seen["before"].items() if v[0] != v[1] and n != "RLIMIT_CPU"}
    assert unpinned == {}, unpinned
    assert seen["before"]["RLIMIT_STACK"] == [8 << 20, 8 << 20]
    assert seen["before"]["RLIMIT_AS"] == [LIMIT_MB << 20, LIMIT_MB << 20]


def test_cpu_soft_limit_gains_nothing() -> None:
    """A program raises its CPU soft limit to the hard one and spins: it still cannot pass the hard limit (killed, not ok)."""
    code = ("import resource\nsoft, hard = resource.getrlimit(resource.RLIMIT_CPU)\n"
            "resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))\nwhile True:\n    pass")
    result = run_python(code, limits=SandboxLimits(timeout_s=5, cpu_s=1))
    # Killed by the kernel at the hard CPU limit (SIGKILL, status error), not by the wall-clock timer
    # (which would give status timeout): no wall-time bound, which flaked on a busy machine.
    assert result.status == "error" and result.exit_code == 137 and result.detail != f"wall clock > 5s", result
