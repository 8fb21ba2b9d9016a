"""Math RL reward: the boxed answer after `</think>`, checked for symbolic equivalence.

Binary: 1.0 when the boxed answer (`\\boxed{...}`, also `\\fbox{...}` and `\\boxed x`) of
the final text is equivalent to the reference under math-verify, else 0.0. No "last number in
the text" fallback: it would reward guessing. Guarantees (a policy optimises what this pays):
- Only the text after the last `</think>` counts. A think block left open (`<think>` with
  no `</think>` after it) has no final text: `no_boxed_answer`, never a box from the
  reasoning. A truncated last box is no answer either.
- One answer: the last box of the final text, as verl's `last_boxed_only_string`
  (verl/utils/reward_score/math.py) takes it and math-verify's `extract_target_from_pred`
  tries the rightmost match first (it also joins boxes listed as `\\boxed{1}, \\boxed{2}`
  into one set answer; here only the last counts), so an honest
  self-correction (`\\boxed{3}, or rather \\boxed{4}`) is paid for 4. Spraying boxes
  earns nothing: only the last one counts, exactly as if it were the only one. Empty boxes (a
  format note's `\\boxed{}`) are skipped unless nothing else is boxed. One deliberate
  difference from verl (whose `rfind` takes the innermost box): a last box that holds another
  box (`\\boxed{\\boxed{3}}`, thousands deep) is `nested_boxes`, rejected unchecked.
- No paying for the question: when the prompt is given, a boxed expression with an operator
  (`2^{10}`, `\\binom{10}{3}`, `(x+1)^2`) copied from the prompt scores
  `restates_question` unless it is written exactly as the reference; math-verify would
  otherwise evaluate the question for the model. Bare values (`3`, `\\frac{1}{2}`,
  `\\sqrt{2}`) are never flagged, so multiple-choice answers still pay.
- Bounded cost: a final text over `MAX_ANSWER_CHARS` scores `answer_too_long` unparsed;
  extraction is linear; expressions built to hang sympy (`9^{9^{9^9}}`, `10^{10^{10}}!`,
  thousands of nested braces) end as `timeout` (score 0) within the per-check limit.
- Equivalence is math-verify's: `\\text{3}` and `3\\text{ cm}` pay for 3, `2x+1` pays for
  `y = 2x+1`, `x` does not pay for `x = 5`, infinities or NaN never equal a finite value.

math-verify bounds its own work with `signal.alarm`, which only works in a process's main
thread (trainers and Dagster call rewards from worker threads). So every check runs in a
small pool of worker *processes* (`python -m rewards.math`, JSON lines over pipes, no
re-import of the caller's `__main__`). Inside a worker our SIGALRM interrupts a slow check
(reason `timeout`); if the worker does not answer within a grace period after that, it is
killed and replaced, and the completion still gets `timeout`.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from curation.chat import THINK_CLOSE, THINK_OPEN, final_text, parse_conversation
from rewards.base import Reward, RewardResult

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_TOKEN_RE = re.compile(r"[^\s${}]+")
_BRACE_RE = re.compile(r"[{}]")
_DELIMITERS = ("$", "\\(", "\\[", "\\boxed", "\\fbox")
MAX_ANSWER_CHARS = 200_000
# An operator between operands, or an operation command: the expression is not yet a value.
_UNEVALUATED_RE = re.compile(r"(?<=[\w})\]|])\s*[-+*^!]|\\(?:cdot|times|div|[dt]?binom|choose|sum|prod|int|lim"
                             r"|log|ln|exp|sin|cos|tan|sec|csc|cot|arcsin|arccos|arctan|gcd|lcm|max|min)(?![A-Za-z])")
_SQUASH_RE = re.compile(r"\s+|\$|[{}]|\\left(?![A-Za-z])|\\right(?![A-Za-z])|\\[,;:! ]")


def _top_boxes(text: str) -> Iterator[tuple[str | None, bool]]:
    """(content, holds another box) of every top-level box in order; content None for an
    unterminated one. Braces are matched in one linear pass (`\\{` and `\\}` are escaped)."""
    matches = list(_BOX_RE.finditer(text))
    closing: dict[int, int] = {}
    stack: list[int] = []
    for brace in _BRACE_RE.finditer(text, matches[0].end() if matches else len(text)):
        j = brace.start()
        if text[j - 1] != "\\":
            if text[j] == "{":
                stack.append(j)
            elif stack:
                closing[stack.pop()] = j
    k = 0
    while k < len(matches):
        i = matches[k].end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            end = closing.get(i, len(text))
            content = text[i + 1:end].strip() if i in closing else None
        else:
            token = _TOKEN_RE.match(text, i)  # `\boxed 7$`: one token
            end, content = (token.end(), token.group(0)) if token else (i, None)
        k += 1
        nested = False
        while k < len(matches) and matches[k].start() < end:  # boxes inside this one
            nested, k = True, k + 1
        yield content, nested


def final_box(text: str) -> tuple[str | None, str | None]:
    """(the answer, None), or (None, why there is none): the content of the last top-level box
    of `text` (see module docstring). Linear in the text.

    >>> final_box(r"It is \\boxed{3}, or rather \\boxed{ 4 }."), final_box(r"\\boxed{1} \\boxed{2")
    (('4', None), (None, 'no_boxed_answer'))
    >>> final_box(r"So \\boxed{4}. Format: \\boxed{}"), final_box(r"\\boxed{}"), final_box(r"\\boxed{\\boxed{3}}")
    (('4', None), ('', None), (None, 'nested_boxes'))
    """
    last: tuple[str | None, bool] | None = None
    for content, nested in _top_boxes(text):
        if content or last is None or content is None or last[0] == "":
            last = (content, nested)
    if last is None or last[0] is None:
        return None, "no_boxed_answer"
    return (None, "nested_boxes") if last[1] else (last[0], None)


def last_boxed(text: str) -> str | None:
    """Content of the last box of `text` (`\\boxed{...}`, `\\fbox{...}`, `\\boxed x`), or None
    (none, an unterminated last box, or a box inside the last box).

    >>> last_boxed(r"so \\boxed{1} or rather \\boxed{\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    >>> last_boxed(r"$\\boxed 7$"), last_boxed("no box"), last_boxed(r"\\boxed{\\frac{1}{2}")
    ('7', None, None)
    """
    return final_box(text)[0]


def answer_text(completion: str) -> str:
    """The scored text: after the last `</think>`; empty when a think block is left open."""
    return "" if completion.rfind(THINK_OPEN) > completion.rfind(THINK_CLOSE) else final_text(completion)


def restates_question(boxed: str, prompt: Any, reference: str) -> bool:
    """Whether `boxed` is an unevaluated expression copied from the prompt (not the reference).

    >>> restates_question("2^{10}", "What is $2^{10}$?", "1024"), restates_question("1024", "What is $2^{10}$?", "1024")
    (True, False)
    >>> restates_question(r"\\frac{1}{2}", r"Pick one: (A) $\\frac{1}{2}$ (B) $\\frac{1}{3}$", "1/2")
    False
    """
    text = _prompt_text(prompt)
    if not text or not _UNEVALUATED_RE.search(boxed):
        return False
    squashed = _squash(boxed)
    return bool(squashed) and squashed in _squash(text) and squashed != _squash(reference)


def _squash(latex: str) -> str:
    return _SQUASH_RE.sub("", latex).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        turns = parse_conversation(prompt)
        return "\n".join(t["content"] for t in turns) if turns else prompt
    if isinstance(prompt, list):
        return "\n".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in prompt)
    return "" if prompt is None else str(prompt)


def reference_latex(answer: str) -> str:
    """Give a bare reference (`3/4`, `\\frac{3}{4}`, `x=5`) delimiters math-verify looks for."""
    answer = answer.strip()
    return answer if any(d in answer for d in _DELIMITERS) else f"\\boxed{{{answer}}}"


class VerifierPool:
    """Worker processes running `check(gold, pred)` with a hard per-check timeout."""

    def __init__(self, workers: int = 2, timeout_s: float = 5.0, grace_s: float = 2.0, start_timeout_s: float = 120.0):
        self.workers, self.timeout_s, self.grace_s, self.start_timeout_s = workers, timeout_s, grace_s, start_timeout_s
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def _spawn(self) -> subprocess.Popen:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.Popen(
            [sys.executable, "-m", "rewards.math", "--worker", str(self.timeout_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, bufsize=0,
        )
        ready, _, _ = select.select([proc.stdout], [], [], self.start_timeout_s)
        if not ready or proc.stdout.readline().strip() != b"ready":
            self._kill(proc)
            raise RuntimeError("math verifier worker did not start")
        return proc

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream:
                stream.close()

    def _send(self, slot: int, line: str) -> None:
        """Write a task; a worker that died while idle is replaced first."""
        for _ in range(2):
            try:
                self._procs[slot].stdin.write(line.encode())
                return
            except (BrokenPipeError, OSError):
                self._kill(self._procs[slot])
                self._procs[slot] = self._spawn()
        raise RuntimeError("math verifier worker keeps dying")

    def close(self) -> None:
        """Stop every worker (they are also stopped at interpreter exit)."""
        with self._lock:
            for proc in self._procs:
                self._kill(proc)
            self._procs = []

    def map(self, tasks: list[tuple[str, str]]) -> list[tuple[str, str | None]]:
        """(reason, detail) per (gold, pred) task, in order; reasons from `check` or `timeout`."""
        with self._lock:
            while len(self._procs) < min(self.workers, max(1, len(tasks))):
                self._procs.append(self._spawn())
            results: list[tuple[str, str | None] | None] = [None] * len(tasks)
            todo = list(range(len(tasks)))[::-1]
            busy: dict[int, tuple[int, float]] = {}  # slot -> (task index, deadline)
            idle = list(range(len(self._procs)))
            while todo or busy:
                while todo and idle:
                    slot, idx = idle.pop(), todo.pop()
                    self._send(slot, json.dumps({"gold": tasks[idx][0], "pred": tasks[idx][1]}) + "\n")
                    busy[slot] = (idx, time.monotonic() + self.timeout_s + self.grace_s)
                streams = {self._procs[s].stdout: s for s in busy}
                wait = max(0.0, min(d for _, d in busy.values()) - time.monotonic())
                ready, _, _ = select.select(list(streams), [], [], wait)
                for stream in ready:
                    slot = streams[stream]
                    idx, _ = busy.pop(slot)
                    raw = stream.readline()
                    if raw:
                        answer = json.loads(raw)
                        results[idx] = (answer["reason"], answer.get("detail"))
                    else:  # the worker died (e.g. out of memory): replace it, infra error
                        results[idx] = ("worker_error", f"exit code {self._procs[slot].wait()}")
                        self._kill(self._procs[slot])
                        self._procs[slot] = self._spawn()
                    idle.append(slot)
                now = time.monotonic()
                for slot, (idx, deadline) in list(busy.items()):
                    if now >= deadline:  # stuck in C code: SIGALRM could not interrupt it
                        busy.pop(slot)
                        results[idx] = ("timeout", "worker killed after hard deadline")
                        self._kill(self._procs[slot])
                        self._procs[slot] = self._spawn()
                        idle.append(slot)
            return [r if r is not None else ("worker_error", None) for r in results]


_POOLS: dict[tuple[int, float], VerifierPool] = {}


def shared_pool(workers: int, timeout_s: float) -> VerifierPool:
    """One pool per (workers, timeout) per process: rewards built per stage share workers."""
    key = (workers, timeout_s)
    if key not in _POOLS:
        _POOLS[key] = VerifierPool(workers, timeout_s)
    return _POOLS[key]


@atexit.register
def _close_pools() -> None:
    for pool in _POOLS.values():
        pool.close()


class MathReward(Reward):
    """Binary math reward (column `answer`).

    >>> reward = MathReward()
    >>> reward(["1/2 + 1/4?"] * 3, [r"<think>1/2+1/4</think>It is \\boxed{\\frac{3}{4}}", r"\\boxed{0.75}",
    ...                            "The answer is 3/4."], answer=["3/4"] * 3)
    [1.0, 1.0, 0.0]
    >>> [r.reason for r in reward.score([None], [r"\\boxed{1}"], answer=["2"])]
    ['wrong_answer']
    """

    name = "math"  # version: the source digest of this module and its local imports (Reward.version)

    def __init__(self, timeout_s: float = 5.0, workers: int | None = None, pool: VerifierPool | None = None):
        """`timeout_s`: per-check limit; `workers`: verifier processes (default: min(4, cores))."""
        workers = workers or max(1, min(4, os.cpu_count() or 1))
        self.pool = pool or shared_pool(workers, float(timeout_s))

    def close(self) -> None:
        self.pool.close()

    def _score_batch(self, prompts: list[Any], completions: list[str], columns: dict[str, list]) -> list[RewardResult]:
        answers = columns.get("answer")
        if answers is None:
            return [RewardResult(0.0, "missing_column:answer", True) for _ in completions]
        results: list[RewardResult | None] = [None] * len(completions)
        pending: dict[int, tuple[str, str]] = {}  # completion -> its check (deduped: G rollouts agree)
        for i, completion in enumerate(completions):
            answer = answers[i] if isinstance(answers, (list, tuple)) else answers
            if answer is None or not str(answer).strip():
                results[i] = RewardResult(0.0, "missing_reference", True)
                continue
            text = answer_text(completion)
            boxed, why_not = final_box(text) if len(text) <= MAX_ANSWER_CHARS else (None, None)
            if len(text) > MAX_ANSWER_CHARS:
                results[i] = RewardResult(0.0, "answer_too_long", detail=f"{len(text)} characters")
            elif boxed is None:
                left_open = completion.rfind(THINK_OPEN) > completion.rfind(THINK_CLOSE)
                results[i] = RewardResult(0.0, why_not or "no_boxed_answer",
                                          detail="think block left open" if left_open else None)
            elif restates_question(boxed, prompts[i] if i < len(prompts) else None, str(answer)):
                results[i] = RewardResult(0.0, "restates_question")
            else:
                pending[i] = (reference_latex(str(answer)), f"\\boxed{{{boxed}}}")
        keys = list(dict.fromkeys(pending.values()))
        verdicts = dict(zip(keys, self.pool.map(keys) if keys else []))
        for i, key in pending.items():
            reason, detail = verdicts[key]
            results[i] = RewardResult(1.0 if reason == "correct" else 0.0, reason, reason in _INFRA_REASONS, detail)
        return [r for r in results if r is not None]


# Our failures, not the model's: a bad reference, a crashed or stuck verifier.
_INFRA_REASONS = {"bad_reference", "worker_error", "timeout", "verifier_error"}


def check(gold: str, pred: str) -> tuple[str, str | None]:
    """Compare two delimited LaTeX strings with math-verify (runs inside a worker)."""
    from math_verify import parse, verify

    gold_parsed = _parse_gold(gold)
    if not gold_parsed:
        return "bad_reference", gold[:200]
    pred_parsed = parse(pred, parsing_timeout=None)
    if not pred_parsed:
        return "parse_error", pred[:200]
    return ("correct" if verify(gold_parsed, pred_parsed, timeout_seconds=None) else "wrong_answer"), None


_GOLD_CACHE: dict[str, list] = {}


def _parse_gold(gold: str) -> list:
    from math_verify import parse

    if gold not in _GOLD_CACHE:
        if len(_GOLD_CACHE) > 10_000:
            _GOLD_CACHE.clear()
        _GOLD_CACHE[gold] = parse(gold, parsing_timeout=None)
    return _GOLD_CACHE[gold]


class _Timeout(BaseException):
    """Not an Exception: math-verify swallows those and would report a timeout as wrong."""


def _worker(timeout_s: float) -> None:
    """Serve checks as JSON lines: the protocol owns fd 1, stray prints go to stderr."""
    import logging
    import signal

    logging.disable(logging.WARNING)  # math-verify warns that its own timeout is off: ours is on
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def on_alarm(_signum: int, _frame: Any) -> None:
        raise _Timeout()

    signal.signal(signal.SIGALRM, on_alarm)
    check("$1$", "$1$")  # warm the imports before declaring readiness
    protocol.write("ready\n")
    for line in sys.stdin:
        task = json.loads(line)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            reason, detail = check(task["gold"], task["pred"])
        except _Timeout:
            reason, detail = "timeout", f"over {timeout_s}s"
        except Exception as err:  # noqa: BLE001 - a sympy crash on odd input is not the model's fault
            reason, detail = "verifier_error", f"{type(err).__name__}: {err}"[:500]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        protocol.write(json.dumps({"reason": reason, "detail": detail}) + "\n")


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    _worker(float(sys.argv[2]))
