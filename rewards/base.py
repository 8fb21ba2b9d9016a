"""The reward contract shared by every verifier, and the one place a reward's failure is contained.

A reward is a plain callable in the TRL style, `fn(prompts, completions, **columns)`,
returning one float (or None) per completion. Columns are the RL prompt-set columns
(`answer`, `tests`, `instruction_id_list`, `kwargs`, `golden_patch`, `code_context`, ...),
each a list aligned with `completions`.

Why a class and not only a function: the trainer and audits also need *why* a score was
given and whether the failure was the model's (wrong answer) or ours (sandbox crash).
`score()` returns a `RewardResult` per completion; `__call__` is the TRL-style view.

Failure is contained in one place, `contain`, which `Reward.score` runs around a subclass's
`_score_batch` (and around each row of a `_score_one` reward, so a row that raises costs only
that row): a raise, the wrong number of results, a score that is not a finite number or (with
`timeout_s`) a call that does not return in time becomes a zero score flagged `infra_error` with
its reason (`reward_error`, `wrong_length`, `bad_score`, `reward_timeout`), never a crash or a
hung stage. Subclasses therefore implement `_score_batch` or `_score_one`, never `score`.

Versions are derived from code, never written by hand: `version` is the digest of the
source the reward runs (`spec.hashing.source_version`: its module and the local modules it
imports, so an edit anywhere in its code re-versions it and nothing else), plus
`version_options()`, a suffix for the options that change scores (a similarity scorer, a
threshold, reward-model weights). The reward cache and lineage key on it, so an edit
invalidates cached scores and makes the stages that use the reward stale. Assigning
`reward.version = "..."` pins a version (wrappers such as the cache copy their inner one).
"""

from __future__ import annotations

import functools
import logging
import math
import numbers
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RewardResult:
    """One completion's score and the structured reason behind it."""

    score: float | None
    """The reward; None means 'not applicable' (TRL skips it in weighted sums)."""
    reason: str
    """Machine-readable reason: correct, wrong_answer, no_boxed_answer, timeout, format_error,
    sandbox_error, reward_error, ..."""
    infra_error: bool = False
    """True when the verifier itself failed (not the model's fault)."""
    detail: str | None = None
    """Free text for humans (first failing test, exception message, ...)."""


def completion_text(completion: Any) -> str:
    """Accept TRL's conversational completions ([{"role", "content"}]) as well as strings."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return "" if completion is None else str(completion)


def class_source_version(cls: type) -> str:
    """The source digest of the module defining `cls` (its own code plus its local imports)."""
    from spec.hashing import SourceNotFoundError, object_source_version, stable_hash

    try:
        return object_source_version(cls)
    except SourceNotFoundError:  # defined in a REPL or from a string: hash what inspect sees
        import inspect

        try:
            return "src-" + stable_hash(inspect.getsource(cls), 12)
        except (OSError, TypeError):
            return "unversioned"


def _failed(n: int, reason: str, detail: str) -> list[RewardResult]:
    return [RewardResult(0.0, reason, True, detail) for _ in range(n)]


def _checked(value: Any) -> RewardResult:
    """One returned element as a RewardResult: a RewardResult or a bare number / None (a TRL-style
    function's); a score that is not a finite number is the reward's failure (`bad_score`)."""
    if isinstance(value, RewardResult):
        result, score = value, value.score
    else:
        result, score = RewardResult(value, "scored" if value is not None else "not_applicable"), value
    if score is None:
        return result
    if isinstance(score, numbers.Real) and math.isfinite(float(score)):
        return result if type(score) is float else RewardResult(float(score), result.reason, result.infra_error,
                                                                result.detail)
    return RewardResult(0.0, "bad_score", True, f"not a finite number: {score!r}"[:200])


def checked(raw: Any, n: int) -> list[RewardResult]:
    """`n` RewardResults from what a reward's `_score_batch` returned: the wrong number of results
    (or not a list) is `wrong_length` for every completion, a score that is not a finite number is
    `bad_score` for its completion. `contain` runs it on every call; the cache on what it stores."""
    if isinstance(raw, (str, bytes, dict)) or not hasattr(raw, "__iter__"):
        return _failed(n, "wrong_length", f"returned a {type(raw).__name__}, not one score per completion")
    values = list(raw)  # a generator runs here: its errors are the reward's too
    if len(values) != n:
        return _failed(n, "wrong_length", f"{len(values)} scores for {n} completions")
    return [_checked(v) for v in values]


def contain(call: Callable[[], Iterable[Any]], n: int, name: str = "reward",
            timeout_s: float | None = None) -> list[RewardResult]:
    """Exactly `n` RewardResults from a reward's `call`, whatever it does (see the module docstring).

    With `timeout_s` the call runs in a daemon thread: a Python thread cannot be killed, so a hung
    reward is abandoned (it cannot block the exit either). Built-in verifiers enforce their own
    per-completion limits in killable processes; this bounds plug-in rewards.

    >>> [(r.score, r.reason) for r in contain(lambda: [1, None, float("nan")], 3)]
    [(1.0, 'scored'), (None, 'not_applicable'), (0.0, 'bad_score')]
    >>> contain(lambda: 1 / 0, 1)[0].reason
    'reward_error'
    """
    box: list[list[RewardResult]] = []

    def guarded() -> None:
        try:
            box.append(checked(call(), n))
        except Exception as err:  # noqa: BLE001 - contract: a reward never raises into its caller
            log.warning("reward %s failed on %d completions: %s: %s", name, n, type(err).__name__, err)
            box.append(_failed(n, "reward_error", f"{type(err).__name__}: {err}"))

    if timeout_s is None:
        guarded()
        return box[0]
    worker = threading.Thread(target=guarded, name=f"reward-{name}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if box:
        return box[0]
    log.warning("reward %s timed out after %g s on %d completions: scored 0 as failures", name, timeout_s, n)
    return _failed(n, "reward_timeout", f"no result within {timeout_s:g} s")


class Reward:
    """Base class: subclasses implement `_score_batch` (or `_score_one`) and set `name`;
    `version` follows their code, `version_options` adds what their options change."""

    name: str = "reward"
    reads: tuple[str, ...] | None = None
    """The row columns `_score_batch` is handed (rewards.registry sets a built-in's from its entry); None: all."""

    @property
    def __name__(self) -> str:  # TRL logs rewards by __name__
        return self.name

    @property
    def version(self) -> str:
        """`<source digest>[-<version_options()>]`, or the version pinned by assignment."""
        pinned = self.__dict__.get("_pinned_version")
        if pinned is not None:
            return pinned
        if "_source_version" not in self.__dict__:  # the code this instance runs: read once
            self.__dict__["_source_version"] = self.source_version()
        suffix = self.version_options()
        return f"{self.__dict__['_source_version']}-{suffix}" if suffix else self.__dict__["_source_version"]

    @version.setter
    def version(self, value: str) -> None:
        self.__dict__["_pinned_version"] = value

    def source_version(self) -> str:
        """Digest of the code that scores: by default this class's module and its local imports."""
        return class_source_version(type(self))

    def version_options(self) -> str:
        """The part of the version that options decide ('' when no option changes scores)."""
        return ""

    def runs_current_code(self) -> bool:
        """Whether the source digest this instance read (once) is still that of its code on disk."""
        read = self.__dict__.get("_source_version")
        return read is None or read == self.source_version()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "score" in vars(cls):  # an override would bypass `contain`: the one place failure is contained
            raise TypeError(f"{cls.__name__}: implement _score_batch or _score_one, not score")

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        return [r.score for r in self.score(prompts, completions, **columns)]

    def score(self, prompts: Sequence[Any], completions: Sequence[Any], *, timeout_s: float | None = None,
              **columns: Any) -> list[RewardResult]:
        """One RewardResult per completion, scored with the columns it `reads`; never raises (`contain`);
        `timeout_s` bounds the call."""
        texts = [completion_text(c) for c in completions]
        rows = list(prompts or [None] * len(texts))
        if self.reads is not None:
            columns = {k: v for k, v in columns.items() if k in self.reads}
        return contain(functools.partial(self._score_batch, rows, texts, columns), len(texts), self.name, timeout_s)

    def _score_batch(self, prompts: list[Any], completions: list[str],
                     columns: dict[str, list]) -> Iterable[RewardResult | float | None]:
        """One RewardResult (or bare number / None) per completion; may raise (`score` contains it).
        By default `_score_one` per row, each contained on its own: a row that raises costs only itself."""
        out = []
        for i, completion in enumerate(completions):
            row = {k: (v[i] if isinstance(v, (list, tuple)) else v) for k, v in columns.items()}
            prompt = prompts[i] if i < len(prompts) else None
            out.extend(contain(lambda p=prompt, c=completion, r=row: [self._score_one(p, c, r)], 1, self.name))
        return out

    def _score_one(self, prompt: Any, completion: str, row: dict[str, Any]) -> RewardResult:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, version={self.version!r})"
