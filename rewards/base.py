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


class Reward:
    """Base class: subclasses implement `_score_batch` (or `_score_one`) and set `name`/`version`."""

    name: str = "reward"
    version: str = "0"

    @property
    def __name__(self) -> str:  # TRL logs rewards by __name__
        return self.name

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
