"""Plain reward functions (and other non-Reward callables) behind the Reward contract.

A recipe can name its own reward by import path (`my_pkg.rewards:brevity`) or by file
(`path/to/my_rewards.py:brevity`): any callable `fn(prompts, completions, **columns)` that
returns one float (or None, "not applicable") per completion, TRL's reward-function shape.
`FunctionReward` adapts it, so the trainer, the cache and `cascade verify` see one contract:

- Options: the function's keyword-only parameters with defaults are its options
  (`def brevity(prompts, completions, *, limit=200, **columns)`); the recipe's `options:`
  are bound to them like `functools.partial`, checked at recipe load against those names and
  annotations. An option shadows a column of the same name. Keyword-only parameters without
  a default are columns the function requires.
- Columns: every column goes to a function that takes `**columns`; otherwise only the
  columns it names.
- Failures are scores with a reason, never a crash, contained where every reward's are
  (rewards.base.contain): a raise scores every completion 0 with `reward_error`
  (`infra_error`, the exception text as detail); a result of the wrong length (or not a list)
  gives `wrong_length`; an element that is not a finite number gives `bad_score` for that
  completion; None stays None (`not_applicable`).
- Name and version: the name is the one the recipe used; the version is the source digest
  of the function's module (spec.hashing.source_version: the file, the local modules it
  imports, its package's files) plus a hash of the bound options.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable

from rewards.base import Reward


def function_options(fn: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """The options of a reward function: its keyword-only parameters that have a default."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: no introspectable options
        return {}
    return {p.name: p for p in params if p.kind is p.KEYWORD_ONLY and p.default is not p.empty}


class FunctionReward(Reward):
    """A TRL-style reward callable adapted to the Reward contract (see the module docstring).

    >>> def brevity(prompts, completions, *, limit=5, **columns):
    ...     return [1.0 if len(c) <= limit else 0.0 for c in completions]
    >>> reward = FunctionReward(brevity, "brevity", options={"limit": 3})
    >>> reward([None, None], ["abc", "abcd"]), reward.name
    ([1.0, 0.0], 'brevity')
    """

    def __init__(self, fn: Callable[..., Any], name: str, options: dict[str, Any] | None = None,
                 bind: bool = True) -> None:
        """`fn`: the callable; `name`: how the recipe names it; `options`: bound to `fn`'s
        keyword-only parameters (with `bind=False` they only version it, e.g. the constructor
        options of an already built callable object)."""
        self.fn, self.name = fn, name
        self.options = dict(options or {})
        self._bound = dict(self.options) if bind else {}
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            params = []  # type: ignore[assignment]
        self._all_columns = not params or any(p.kind is p.VAR_KEYWORD for p in params)
        self._named = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
        # Digest now, not on first use: the version names the code this object runs, even if
        # its file is edited (and reloaded by the next get_reward) while it lives.
        self.__dict__["_source_version"] = self.source_version()

    def source_version(self) -> str:
        from spec.hashing import SourceNotFoundError, object_source_version

        try:
            return object_source_version(self.fn)
        except SourceNotFoundError:  # defined in a REPL or from a string
            return "src-" + _fallback_digest(self.fn)

    def version_options(self) -> str:
        if not self.options:
            return ""
        from spec.hashing import stable_hash

        return stable_hash(self.options, 8)

    def _score_batch(self, prompts: list[Any], completions: list[str], columns: dict[str, list]) -> Iterable[Any]:
        """The function's raw result (numbers or None): `Reward.score` checks and contains it."""
        kwargs = {k: v for k, v in columns.items()
                  if k not in self._bound and (self._all_columns or k in self._named)}
        return self.fn(prompts, completions, **kwargs, **self._bound)


def _fallback_digest(fn: Callable[..., Any]) -> str:
    """A digest of what inspect can see of a callable without a source file (a REPL function)."""
    from spec.hashing import stable_hash

    try:
        return stable_hash(inspect.getsource(fn), 12)
    except (OSError, TypeError):
        return stable_hash(repr(fn), 12)
