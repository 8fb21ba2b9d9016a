"""The reward contract shared by every verifier.

A reward is a plain callable in the TRL style, `fn(prompts, completions, **columns)`,
returning one float (or None) per completion. Columns are the RL prompt-set columns
(`answer`, `tests`, `instruction_id_list`, `kwargs`, `golden_patch`, `code_context`, ...),
each a list aligned with `completions`.

Why a class and not only a function: the trainer and audits also need *why* a score was
given and whether the failure was the model's (wrong answer) or ours (sandbox crash).
`score()` returns a `RewardResult` per completion; `__call__` is the TRL-style view.
A reward never raises into its caller: any exception becomes a zero score with
`infra_error=True` and the exception text as the reason detail.

Versions are derived from code, never written by hand: `version` is the digest of the
source the reward runs (`spec.hashing.source_version`: its module and the local modules it
imports, so an edit anywhere in its code re-versions it and nothing else), plus
`version_options()`, a suffix for the options that change scores (a similarity scorer, a
threshold, reward-model weights). The reward cache and lineage key on it, so an edit
invalidates cached scores and makes the stages that use the reward stale. Assigning
`reward.version = "..."` pins a version (wrappers such as the cache copy their inner one).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

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


class Reward:
    """Base class: subclasses implement `_score_batch` (or `_score_one`) and set `name`;
    `version` follows their code, `version_options` adds what their options change."""

    name: str = "reward"

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

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        return [r.score for r in self.score(prompts, completions, **columns)]

    def score(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[RewardResult]:
        texts = [completion_text(c) for c in completions]
        try:
            results = self._score_batch(list(prompts or [None] * len(texts)), texts, columns)
            if len(results) != len(texts):
                raise RuntimeError(f"{self.name}: {len(results)} results for {len(texts)} completions")
            return results
        except Exception as err:  # noqa: BLE001 - contract: never raise into the trainer
            log.exception("reward %s failed on a batch", self.name)
            return [RewardResult(0.0, "reward_error", True, f"{type(err).__name__}: {err}") for _ in texts]

    def _score_batch(self, prompts: list[Any], completions: list[str], columns: dict[str, list]) -> list[RewardResult]:
        out = []
        for i, completion in enumerate(completions):
            row = {k: (v[i] if isinstance(v, (list, tuple)) else v) for k, v in columns.items()}
            try:
                out.append(self._score_one(prompts[i] if i < len(prompts) else None, completion, row))
            except Exception as err:  # noqa: BLE001
                out.append(RewardResult(0.0, "reward_error", True, f"{type(err).__name__}: {err}"))
        return out

    def _score_one(self, prompt: Any, completion: str, row: dict[str, Any]) -> RewardResult:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, version={self.version!r})"
