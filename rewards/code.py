"""Code RL reward: 1.0 only if the extracted program passes every test, run in the sandbox.

Code extraction: from the text after `</think>`, the last fenced block tagged `python`
(also `py`, `python3`); else the last untagged fenced block; else the whole text.
Reasons: correct, wrong_answer, runtime_error, timeout, memory_limit, no_code,
format_error (bad `tests` JSON), sandbox_error (infra_error=True), missing_column:tests.

The `tests` column is a JSON string (or an already-decoded dict) in one of two forms:

    {"kind": "stdio", "cases": [{"input": "1 2\\n", "output": "3\\n"}, ...],
     "float_tol": null, "time_limit_s": 2.0}
    {"kind": "assert", "entry_point": "add",
     "asserts": ["assert add(1, 2) == 3", ...], "time_limit_s": 2.0}

- stdio: each case is one run of the program with `input` on stdin; it passes when the
  program exits 0 and its stdout equals `output` after normalisation (trailing whitespace
  stripped from every line, trailing empty lines dropped). With `float_tol` set, tokens
  that both parse as floats match when |got - want| <= float_tol * max(1, |want|); other
  tokens still match exactly. Cases of all completions of a batch run in parallel through
  the sandbox pool; once a case fails, the completion's remaining cases are skipped.
  `time_limit_s` is per case.
- assert: the verdict is computed out of the candidate's reach (rewards.code_judge): the
  solution runs in one sandbox and serves calls; the tests run in another sandbox (the judge)
  against proxies of the solution's functions, and only plain data crosses between them, through
  this process. The tests see only the functions the row leaves to the candidate: the
  `entry_point` and the stubs the prompt declares; builtins, modules and the prompt's helpers
  are the judge's (rewards.code_names), so a solution cannot redefine `len` or `abs` for the
  tests. Without an entry point or stubs, the names the tests use but never define are the
  candidate's. `entry_point` (optional) must be defined; assert snippets run in order (a
  snippet may define helpers, e.g. HumanEval's `def check(candidate): ...` followed by
  `check(add)`). `time_limit_s` is per snippet: the completion's limit is time_limit_s x number
  of snippets.
Every completion also has a total budget (`CodeRewardConfig.total_time_limit_s`).

What the candidate can reach: its own process (its code, its stdout/stderr, the arguments of
each call). The expected outputs of stdio cases and the assert tests are never in its process or
its filesystem; stdio outputs are compared here, asserts in the judge. So exiting 0, printing
success-looking text, forging objects with a permissive `__eq__`, walking frames, scanning fds
or patching builtins cannot produce a pass (tests/redteam/test_redteam_code.py tries each), and
neither can defining a name the tests call (tests/redteam/test_redteam_code_names.py).

>>> reward = CodeReward()
>>> tests = '{"kind": "stdio", "cases": [{"input": "2 3\\\\n", "output": "5\\\\n"}]}'
>>> good = "```python\\na, b = map(int, input().split())\\nprint(a + b)\\n```"
>>> bad = "```python\\nprint(0)\\n```"
>>> out = reward.score([None, None], [good, bad], tests=[tests, tests])
>>> [(r.score, r.reason) for r in out]
[(1.0, 'correct'), (0.0, 'wrong_answer')]
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from curation.chat import final_text
from rewards.base import Reward, RewardResult
from rewards.code_judge import JudgePool, judge_asserts
from rewards.fences import fenced_blocks
from sandboxes.limits import SandboxLimits, SandboxResult
from sandboxes.pool import SandboxJob, SandboxPool
from sandboxes.session import SandboxProcess

_PY_TAGS = {"python", "py", "python3"}


@dataclass(frozen=True)
class CodeRewardConfig:
    """How programs are run and judged."""

    default_time_limit_s: float = 2.0
    """Per-test wall limit when the tests JSON has no `time_limit_s`."""
    total_time_limit_s: float = 30.0
    """Wall-time budget of one completion across all its tests."""
    max_workers: int | None = None
    """Parallel sandboxes; None = os.cpu_count()."""
    memory_mb: int = 1024
    """Memory limit of each run, MiB: the whole process tree of the program (and of the judge)."""


def extract_code(completion: str) -> str:
    """The program in a completion (see module docstring).

    >>> extract_code("<think>```python\\nx=1\\n```</think>text ```py\\nprint(1)\\n``` and ```python\\nprint(2)\\n```")
    'print(2)\\n'
    >>> extract_code("print(3)")
    'print(3)'
    """
    text = final_text(completion)
    blocks = [(tag.lower(), body) for tag, body in fenced_blocks(text)]
    tagged = [body for tag, body in blocks if tag in _PY_TAGS]
    if tagged:
        return tagged[-1]
    untagged = [body for tag, body in blocks if not tag]
    return untagged[-1] if untagged else text


def normalize_output(text: str) -> list[str]:
    """Lines with trailing whitespace removed and trailing empty lines dropped.

    >>> normalize_output("3  \\n4\\t\\n\\n\\n")
    ['3', '4']
    """
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(got: str, want: str, float_tol: float | None = None) -> bool:
    """Exact match after normalisation; with `float_tol`, numeric tokens match within tolerance.

    >>> outputs_match("3 \\n", "3"), outputs_match("0.3333", "0.33333333", 1e-3), outputs_match("4", "3")
    (True, True, False)
    """
    got_lines, want_lines = normalize_output(got), normalize_output(want)
    if float_tol is None:
        return got_lines == want_lines
    if len(got_lines) != len(want_lines):
        return False
    for got_line, want_line in zip(got_lines, want_lines):
        got_tokens, want_tokens = got_line.split(), want_line.split()
        if len(got_tokens) != len(want_tokens):
            return False
        for a, b in zip(got_tokens, want_tokens):
            if a == b:
                continue
            try:
                fa, fb = float(a), float(b)
            except ValueError:
                return False
            if not abs(fa - fb) <= float_tol * max(1.0, abs(fb)):
                return False
    return True


class TestsFormatError(ValueError):
    """The `tests` value does not follow the documented format."""


def parse_tests(raw: Any, default_time_limit_s: float) -> dict:
    """Validate a `tests` value (JSON string or dict) and fill defaults."""
    try:
        spec = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
    except json.JSONDecodeError as err:
        raise TestsFormatError(f"tests is not valid JSON: {err}") from err
    if not isinstance(spec, dict) or spec.get("kind") not in ("stdio", "assert"):
        raise TestsFormatError('tests must be an object with "kind" "stdio" or "assert"')
    limit = spec.get("time_limit_s", default_time_limit_s)
    if limit is None:
        limit = default_time_limit_s
    if not isinstance(limit, (int, float)) or limit <= 0:
        raise TestsFormatError("time_limit_s must be a positive number")
    spec = {**spec, "time_limit_s": float(limit)}
    if spec["kind"] == "stdio":
        cases = spec.get("cases")
        if not isinstance(cases, list) or not cases or not all(
                isinstance(c, dict) and isinstance(c.get("input", ""), str) and isinstance(c.get("output"), str) for c in cases):
            raise TestsFormatError('stdio tests need a non-empty "cases" list of {"input": str, "output": str}')
        tol = spec.get("float_tol")
        if tol is not None and (not isinstance(tol, (int, float)) or tol < 0):
            raise TestsFormatError("float_tol must be null or a non-negative number")
    else:
        asserts = spec.get("asserts")
        if not isinstance(asserts, list) or not asserts or not all(isinstance(a, str) for a in asserts):
            raise TestsFormatError('assert tests need a non-empty "asserts" list of strings')
        entry = spec.get("entry_point")
        if entry is not None and (not isinstance(entry, str) or not entry.isidentifier()):
            raise TestsFormatError("entry_point must be null or an identifier")
    return spec


class _Budget:
    """Per-completion bookkeeping shared by its test runs (thread-safe)."""

    def __init__(self, total_s: float) -> None:
        self.remaining = total_s
        self.failed = False
        self._lock = threading.Lock()

    def seconds_left(self) -> float | None:
        with self._lock:
            return None if self.failed else self.remaining

    def record(self, result: SandboxResult | None, passed: bool) -> None:
        with self._lock:
            if result is not None:
                self.remaining -= result.wall_ms / 1000
            self.failed = self.failed or not passed


class CodeReward(Reward):
    """Binary code reward; see the module docstring for the `tests` format and reasons."""

    name = "code"  # version: the source digest of this module, rewards.code_* and sandboxes (Reward.version)

    def __init__(self, config: CodeRewardConfig | None = None) -> None:
        self.config = config or CodeRewardConfig()
        self._pool: SandboxPool | None = None
        self._relays: ThreadPoolExecutor | None = None
        self._judges = JudgePool(self._open_process)
        self._pool_lock = threading.Lock()

    @property
    def pool(self) -> SandboxPool:
        with self._pool_lock:
            if self._pool is None:
                self._pool = SandboxPool(self.config.max_workers or os.cpu_count())
            return self._pool

    @property
    def relays(self) -> ThreadPoolExecutor:
        """Threads that relay between an assert completion's two sandboxes (they only wait on pipes)."""
        with self._pool_lock:
            if self._relays is None:
                self._relays = ThreadPoolExecutor(self.config.max_workers or os.cpu_count(), thread_name_prefix="judge")
            return self._relays

    def _limits(self, seconds: float) -> SandboxLimits:
        return SandboxLimits(timeout_s=seconds, memory_mb=self.config.memory_mb)

    def _score_batch(self, prompts: list[Any], completions: list[str], columns: dict[str, list]) -> list[RewardResult]:
        tests_col = columns.get("tests")
        if tests_col is None:
            return [RewardResult(0.0, "missing_column:tests", True) for _ in completions]
        results: list[RewardResult | None] = [None] * len(completions)
        pending = []  # (index, spec, budget, [(case, future)])
        for i, completion in enumerate(completions):
            raw = tests_col[i] if isinstance(tests_col, (list, tuple)) else tests_col
            try:
                spec = parse_tests(raw, self.config.default_time_limit_s)
            except TestsFormatError as err:
                results[i] = RewardResult(0.0, "format_error", True, str(err))
                continue
            code = extract_code(completion)
            if not code.strip():
                results[i] = RewardResult(0.0, "no_code")
                continue
            budget = _Budget(self.config.total_time_limit_s)
            prompt = prompts[i] if i < len(prompts) else None
            pending.append((i, spec, budget, self._submit(code, spec, budget, prompt)))
        for i, spec, budget, runs in pending:
            results[i] = self._judge(spec, budget, runs)
        return results  # type: ignore[return-value]

    def _submit(self, code: str, spec: dict, budget: _Budget, prompt: Any = None) -> Any:
        """Assert kind: a future of the RewardResult; stdio: [(case, future of its SandboxResult)]."""
        limit = spec["time_limit_s"]
        if spec["kind"] == "assert":
            seconds = min(limit * len(spec["asserts"]), budget.seconds_left() or 0.0)
            return self.relays.submit(judge_asserts, code, spec, self._open_process, self._judges, seconds, prompt)
        runs = []
        for case in spec["cases"]:
            job = SandboxJob(code, case.get("input", ""), self._limits(limit))
            future = self.pool.submit(job, budget.seconds_left)
            future.add_done_callback(lambda f, case=case: budget.record(
                None if f.exception() else f.result(), not f.exception() and self._passed(spec, case, f.result())))
            runs.append((case, future))
        return runs

    def _open_process(self, program: str, seconds: float) -> SandboxProcess:
        # The host's deadline (judge_asserts) fires first, so an overrun is reported as a timeout.
        return SandboxProcess(program, SandboxLimits(timeout_s=seconds + 1.0, memory_mb=self.config.memory_mb,
                                                     stdout_bytes=16 << 20))

    @staticmethod
    def _passed(spec: dict, expected: dict, result: SandboxResult | None) -> bool:
        return result is not None and result.ok and outputs_match(result.stdout, expected["output"], spec.get("float_tol"))

    def _judge(self, spec: dict, budget: _Budget, runs: Any) -> RewardResult:
        if spec["kind"] == "assert":
            try:
                return runs.result()
            except Exception as err:  # noqa: BLE001 - infrastructure, never the model's fault
                return RewardResult(0.0, "sandbox_error", True, f"{type(err).__name__}: {err}")
        first_failure: RewardResult | None = None
        for index, (expected, future) in enumerate(runs):
            try:
                result: SandboxResult | None = future.result()
            except Exception as err:  # noqa: BLE001 - infrastructure, never the model's fault
                return RewardResult(0.0, "sandbox_error", True, f"{type(err).__name__}: {err}")
            if result is None or self._passed(spec, expected, result):
                continue  # skipped after an earlier failure, or passed
            verdict = self._failure(index, result)
            if verdict.infra_error:
                return verdict
            first_failure = first_failure or verdict
        return first_failure or RewardResult(1.0, "correct")

    @staticmethod
    def _failure(index: int, result: SandboxResult) -> RewardResult:
        where = f"test {index}"
        if result.status == "sandbox_error":
            return RewardResult(0.0, "sandbox_error", True, result.detail)
        if result.status in ("timeout", "memory_limit"):
            return RewardResult(0.0, result.status, False, f"{where}: {result.detail}")
        if result.status == "ok":
            return RewardResult(0.0, "wrong_answer", False, f"{where}: got {result.stdout[:200]!r}")
        tail = result.stderr.strip().splitlines()[-1:] or [result.detail or result.status]
        return RewardResult(0.0, "runtime_error", False, f"{where}: {tail[0][:300]}")

    def close(self) -> None:
        """Stop the worker threads (idle pools cost nothing; call this when done)."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
            if self._relays is not None:
                self._relays.shutdown(wait=True)
                self._relays = None
        self._judges.close()
