"""The assert-kind verdict, computed where the candidate cannot reach it.

Two sandboxed processes per completion, each in its own sandbox (own uid, pid namespace, private
filesystem), talking only through this host process, by lines of plain data:

    candidate  runs the solution as module `solution` (stdin is /dev/null, its prints go to
               stderr), reports the names it defines, then serves calls: a request names a
               function and carries the arguments; the reply is the return value, or the
               exception's type name, as plain data (rewards.code_wire).
    judge      runs the dataset's test snippets (asserts, HumanEval's `check(candidate)`) in a
               namespace it builds from the row (rewards.code_names): builtins, modules and the
               prompt's helpers are the judge's; only the entry point (and the prompt's stubs)
               are proxies: calling one sends the arguments to the candidate through the host
               and returns the decoded value. A function the candidate declares under any other
               name (`len`, `abs`, `math`, `check`, a helper) never reaches the tests. The
               judge alone decides pass or fail and says so on its own channel.

What the candidate can see: its own code, the arguments of each call as they come. What it
cannot: the tests, the expected values, the judge's process, objects or channel. Only builtin
values cross (exact int, float, str, list, tuple, dict, set, ...), so an object whose `__eq__`
always says yes cannot reach an assert; exiting with status 0, killing itself, printing
anything, walking frames or the garbage collector, scanning its fds, monkeypatching builtins
or `sys.modules` all act on the candidate's own process and can only make its calls fail.
A new hack against this design is one new test in tests/redteam/, not a redesign: whatever the
candidate does, the judge only ever receives values.

Stated limits: a helper the prompt declares as a stub (signature and docstring only) is the
candidate's, so a test that checks one stub against another trusts both; a test that names a
function the prompt does not declare (with an entry point given) fails with NameError; a
call that raises StopIteration is a failed call, not the exception; arguments are copies, so a
test that checks the candidate mutated its input in place cannot pass; a solution whose
functions return non-plain objects (classes, generators) fails.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

from rewards.base import RewardResult
from rewards.code_names import judge_bindings
from rewards.code_wire import program_prelude

_CHANNEL = r'''
def _cascade_channel():
    """(requests, send): the host's line channel, moved off fds 0 and 1 before any other code
    runs; fd 0 becomes /dev/null and prints go to stderr, so they never reach the channel."""
    import json as _json, os as _os, sys as _sys
    requests = _os.fdopen(_os.dup(0), "rb", 0)
    replies = _os.dup(1)
    null = _os.open("/dev/null", _os.O_RDONLY)
    _os.dup2(null, 0)
    _os.close(null)
    _os.dup2(2, 1)
    write, dumps = _os.write, _json.dumps

    def send(obj):
        for stream in (_sys.stdout, _sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        write(replies, (dumps(obj) + "\n").encode())

    return requests, send
'''

_SERVER = r'''
def _cascade_serve(code):
    import json as _json, os as _os
    requests, reply = _cascade_channel()
    encode_, exit_ = encode, _os._exit

    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(code, "solution.py", "exec"), namespace)
    except BaseException as err:
        reply({"load_error": type(err).__name__, "detail": str(err)[:300]})
        exit_(0)
    functions = sorted(name for name, value in namespace.items() if not name.startswith("__") and callable(value))
    reply({"ready": functions})
    while True:
        line = requests.readline()
        if not line:
            exit_(0)
        try:
            request = _json.loads(line)
            function = namespace[request["fn"]]
            args, kwargs = decode(request["args"]), decode(request["kwargs"])
        except Exception as err:
            reply({"error": "bad request: %s" % type(err).__name__})
            continue
        try:
            value = function(*args, **kwargs)
        except BaseException as err:  # SystemExit and KeyboardInterrupt included: a failed call
            reply({"raise": type(err).__name__, "detail": str(err)[:300]})
            continue
        try:
            reply({"ok": encode_(value)})
        except Exception as err:
            reply({"bad_value": str(err)[:300]})
'''

_JUDGE = r'''
class CandidateFailure(Exception):
    """The candidate's call did not return plain data (or the candidate is gone)."""


def _cascade_judge():
    import json as _json, os as _os
    requests, send = _cascade_channel()
    while True:  # one job per line; the host reuses a judge only after a clean verdict
        line = requests.readline()
        if not line:
            _os._exit(0)
        send(_judge_one(_json.loads(line), requests, send))


def _judge_one(job, requests, send):
    import builtins as _builtins, importlib as _importlib, json as _json, os as _os
    import traceback as _tb

    def call(name, args, kwargs):
        try:
            payload = {"call": name, "args": encode(list(args)), "kwargs": encode(dict(kwargs))}
        except WireError as err:
            raise CandidateFailure("the test passes a value that is not plain data: %s" % err)
        send(payload)
        line = requests.readline()
        if not line:
            _os._exit(0)
        answer = _json.loads(line)
        if "gone" in answer:
            raise CandidateFailure("%s: the solution's process ended (%s)" % (name, answer["gone"]))
        if "ok" in answer:
            try:
                return decode(answer["ok"])
            except WireError as err:
                raise CandidateFailure("%s returned something that is not plain data: %s" % (name, err))
        if "raise" in answer:
            # The exception's name is the candidate's: only a builtin Exception that cannot end a
            # test early (StopIteration inside `all(map(candidate, xs))` would skip the asserts).
            kind = getattr(_builtins, str(answer["raise"]), None)
            if (isinstance(kind, type) and issubclass(kind, Exception)
                    and not issubclass(kind, (AssertionError, StopIteration, StopAsyncIteration))):
                raise kind(answer.get("detail", ""))
            raise CandidateFailure("%s raised %s" % (name, answer["raise"]))
        raise CandidateFailure("%s: %s" % (name, answer.get("bad_value") or answer.get("error") or "no answer"))

    def proxy(name):
        def function(*args, **kwargs):
            return call(name, args, kwargs)
        function.__name__ = function.__qualname__ = name
        return function

    namespace = {"__name__": "__judge__", "__builtins__": _builtins}
    # Names come from the row and the judge, never from what the candidate declares
    # (rewards.code_names): the prompt's imports, constants and helpers, then stdlib modules the
    # tests use unimported; only the names the row leaves to the candidate are its proxies.
    for index, source in enumerate(job["prelude"]):
        try:
            exec(compile(source, "<prompt %d>" % index, "exec"), namespace)
        except Exception:
            pass
    for name in job["modules"]:
        if name not in namespace:
            try:
                namespace[name] = _importlib.import_module(name)
            except Exception:
                pass
    for name in job["proxies"]:
        if name in job["functions"]:
            namespace[name] = proxy(name)
    entry = job.get("entry_point")
    if entry is not None and entry not in job["functions"]:
        return {"verdict": "missing_entry_point", "detail": "entry point %r is not defined" % entry}
    for index, snippet in enumerate(job["snippets"]):
        try:
            exec(compile(snippet, "<test %d>" % index, "exec"), namespace)
        except AssertionError:
            return {"verdict": "fail", "detail": "test %d failed\n%s" % (index, _tb.format_exc()[-1500:])}
        except CandidateFailure as err:
            return {"verdict": "fail", "detail": "test %d: %s" % (index, err)}
        except BaseException as err:
            return {"verdict": "error", "detail": "test %d: %s: %s" % (index, type(err).__name__, str(err)[:300])}
    return {"verdict": "pass"}
'''


def candidate_program(code: str) -> str:
    """The candidate's sandbox program: the wire format, the call server, the solution."""
    return f"{program_prelude()}\n{_CHANNEL}\n{_SERVER}\n_cascade_serve({code!r})\n"


def judge_program() -> str:
    """The judge's sandbox program: the wire format and the test runner (the job comes on stdin)."""
    return f"{program_prelude()}\n{_CHANNEL}\n{_JUDGE}\n_cascade_judge()\n"


JUDGE_LIFETIME_S = 900.0
"""A judge sandbox is reused for this long at most (then a fresh one starts)."""


class JudgePool:
    """Idle judge processes, reused across completions: a judge costs one sandbox start per
    JUDGE_LIFETIME_S instead of one per completion. A judge goes back to the pool only after a
    clean verdict; one that timed out or misbehaved is killed."""

    def __init__(self, open_process: Callable[[str, float], Any]) -> None:
        self._open = open_process
        self._idle: list[tuple[Any, float]] = []
        self._lock = threading.Lock()

    def acquire(self, seconds: float) -> Any:
        """A live judge that has at least `seconds` of its lifetime left."""
        now = time.monotonic()
        with self._lock:
            while self._idle:
                judge, expires = self._idle.pop()
                if judge.alive and expires - now > seconds + 1.0:
                    return judge, expires
                judge.close()
        return self._open(judge_program(), JUDGE_LIFETIME_S), now + JUDGE_LIFETIME_S

    def release(self, judge: Any, expires: float, reusable: bool) -> None:
        if reusable and judge.alive:
            with self._lock:
                self._idle.append((judge, expires))
        else:
            judge.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for judge, _ in idle:
            judge.close()


def _status_failure(result: Any, who: str) -> RewardResult:
    """A verdict from a process that ended without answering (its sandbox result)."""
    if result.status == "sandbox_error":
        return RewardResult(0.0, "sandbox_error", True, result.detail)
    if result.status in ("timeout", "memory_limit"):
        return RewardResult(0.0, result.status, False, f"{who}: {result.detail}")
    tail = result.stderr.strip().splitlines()[-1:] or [result.detail or result.status]
    return RewardResult(0.0, "runtime_error", False, f"{who} ended: {tail[0][:300]}")


def judge_asserts(code: str, spec: dict, open_process: Callable[[str, float], Any], judges: JudgePool,
                  seconds: float, prompt: Any = None) -> RewardResult:
    """The verdict of `code` against an assert-kind `spec`, within `seconds` of wall time.

    `open_process(program, lifetime_s)` starts a sandboxed line-talking process
    (sandboxes.session.SandboxProcess with the verifier's limits); `judges` lends the judge; `prompt` is
    the row's prompt, which says which names the candidate supplies (rewards.code_names).
    """
    deadline = time.monotonic() + seconds

    def left() -> float:
        return max(0.0, deadline - time.monotonic())

    with open_process(candidate_program(code), seconds) as candidate:
        line = candidate.readline(left())
        if line is None:
            return _status_failure(candidate.close(), "solution")
        try:
            hello = json.loads(line)
        except ValueError:
            return RewardResult(0.0, "runtime_error", False, "solution: garbled start-up message")
        if "load_error" in hello:
            return RewardResult(0.0, "runtime_error", False, f"solution: {hello['load_error']}: {hello.get('detail', '')}")
        judge, expires = judges.acquire(seconds)
        reusable = False
        try:
            judge.send(json.dumps({"entry_point": spec.get("entry_point"), "snippets": list(spec["asserts"]),
                                   "functions": hello.get("ready", []), **judge_bindings(prompt, spec)}).encode())
            verdict, reusable = _relay(candidate, judge, left, seconds)
            return verdict
        finally:
            judges.release(judge, expires, reusable)


def _relay(candidate: Any, judge: Any, left: Callable[[], float], seconds: float) -> tuple[RewardResult, bool]:
    """Forward the judge's calls to the candidate and the answers back until the judge's verdict.
    Returns (verdict, whether the judge ended its job cleanly and can be reused)."""
    timeout = RewardResult(0.0, "timeout", False, f"asserts: wall clock > {seconds:.1f}s")
    failure: RewardResult | None = None  # the candidate ended mid-call: its status is the verdict
    while True:
        line = judge.readline(left() if failure is None else min(left(), 2.0))
        if line is None:
            if failure is not None:
                return failure, False
            if left() <= 0:
                return timeout, False
            result = judge.close()
            return (_status_failure(result, "tests") if result.status in ("timeout", "memory_limit")
                    else RewardResult(0.0, "sandbox_error", True, f"judge ended: {result.status} {result.detail}")), False
        try:
            message = json.loads(line)
        except ValueError:
            return RewardResult(0.0, "sandbox_error", True, "judge: garbled message"), False
        if "call" in message:
            answer = None
            if failure is None:
                try:
                    candidate.send(json.dumps({"fn": message["call"], "args": message["args"],
                                               "kwargs": message["kwargs"]}).encode())
                    answer = candidate.readline(left())
                except Exception:  # noqa: BLE001 - the candidate's process is gone: judged below
                    answer = None
            if answer is None:
                if left() <= 0:
                    return timeout, False
                failure = failure or _status_failure(candidate.close(), "solution")
                answer = json.dumps({"gone": failure.reason}).encode()
            judge.send(answer)
            continue
        if failure is not None:
            return failure, True
        verdict, detail = message.get("verdict"), message.get("detail")
        if verdict == "pass":
            return RewardResult(1.0, "correct"), True
        if verdict == "fail":
            return RewardResult(0.0, "wrong_answer", False, detail), True
        return RewardResult(0.0, "runtime_error", False, detail), True
