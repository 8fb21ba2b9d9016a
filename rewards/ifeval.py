"""IF-RL reward: IFEval's rule-based instruction verifier, and its thinking-mode blend with a
reward model.

What
----
- `IFEvalReward` scores a completion against the instructions of its prompt: the
  `instruction_id_list` column (IFEval ids, all 25 types in `ifeval_checks.INSTRUCTIONS`)
  and the `kwargs` column (a list of dicts aligned with the ids, or that list as a JSON
  string). Options: `mode` strict|loose and `level` prompt|instruction.
  * strict: the response as is; loose: IFEval's upper bound, an instruction counts as
    followed if any of 8 variants follows it (the response, without its first line,
    without its last line, without both, each also with every `*` removed).
  * prompt level: 1 if every instruction is followed else 0 (the paper's `R_IF`);
    instruction level: the fraction followed.
- `IFEvalRMReward` is the paper's thinking-mode IF-RL reward:
  `r = R_IF + sigmoid(z_RM)` when `R_IF = 1`, else 0, where `z_RM` is the reward-model
  score z-normalised over the completions in the batch that share the same prompt (the
  GRPO group; population std, std 0 -> z 0). The reward model is an injected callable
  `(prompts, responses) -> list[float]`, or built lazily from `model_path` with
  `rewards.reward_model.RewardModelScorer`.

Why this shape
--------------
- Only the text after the last `</think>` is scored (`curation.chat.final_text`), so
  reasoning cannot satisfy or break a format constraint; the same text goes to the reward
  model. A think block left open (`<think>` with no `</think>` after it: a truncated or
  unfinished completion) leaves no answer at all, so it scores `empty_response`.
- Negative constraints ("no commas", "all lowercase", "less than N words") are trivially
  met by saying nothing, so a response with no content is never paid: after invisible
  characters (zero-width spaces, joiners, bidi controls, Hangul fillers) are removed, it
  must hold a letter or a digit, else `empty_response`. The checks also see that visible text, so a
  zero-width space cannot hide a forbidden word; a fullwidth `，` counts as a comma.
- A response over `MAX_RESPONSE_CHARS` (20,000 characters, ~3,000 words: far above any
  IFEval length instruction, which asks for hundreds) scores `response_too_long` without
  being measured, so a megabyte of padding costs no time; every check is linear below
  that (about a second at worst, for text made of thousands of one-word sentences).
- Keyword stuffing (the required keywords repeated) passes keyword instructions, as in
  IFEval, and nothing else: it cannot meet contradictory instructions (a keyword required
  and forbidden, "at least 5" and "less than 3"); answer quality is the reward model's
  part (`IFEvalRMReward`).
- An unknown instruction id is an infrastructure error (`unknown_instruction`,
  `infra_error=True`, score 0), never a pass: a verifier that skips what it does not
  know rewards anything. Malformed kwargs (missing, unexpected, wrong type) likewise give
  `bad_kwargs`; a row without instructions gives `no_instructions`.
- Reasons are machine-readable: `correct`, `instruction_not_followed:<id>,<id>`,
  `empty_response`, `response_too_long`, plus the errors above. The reward never raises
  (base class).
- `version` is this code's source digest plus mode and level, because they change scores
  (cache and lineage key on it). Checks are pure, deterministic functions (langdetect is seeded).
- Text measurement (Punkt sentences, words, Treebank tokens, language) lives in
  `ifeval_text.py`; the checks and their kwarg validation in `ifeval_checks.py`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

from curation.chat import THINK_CLOSE, THINK_OPEN, final_text
from rewards.base import Reward, RewardResult
from rewards.ifeval_checks import INSTRUCTIONS, BadKwargs
from rewards.ifeval_text import has_content, visible_text

MAX_RESPONSE_CHARS = 20_000

Scorer = Callable[[Sequence[Any], Sequence[str]], Sequence[float]]


@dataclass(frozen=True)
class IFEvalConfig:
    """Options of the instruction-following verifier."""

    mode: Literal["strict", "loose"] = "strict"
    """strict: check the response as is; loose: IFEval's 8 relaxed variants (any passes)."""
    level: Literal["prompt", "instruction"] = "prompt"
    """prompt: 1 only if all instructions are followed; instruction: fraction followed."""

    def __post_init__(self) -> None:
        if self.mode not in ("strict", "loose"):
            raise ValueError(f"mode must be 'strict' or 'loose', got {self.mode!r}")
        if self.level not in ("prompt", "instruction"):
            raise ValueError(f"level must be 'prompt' or 'instruction', got {self.level!r}")


def answer_text(completion: str) -> str:
    """The scored text: after the last `</think>`; empty when a think block is left open."""
    return "" if completion.rfind(THINK_OPEN) > completion.rfind(THINK_CLOSE) else final_text(completion)


class UnknownInstruction(KeyError):
    """An instruction id outside IFEval's 25 types."""


def loose_variants(response: str) -> list[str]:
    """IFEval's loose-mode variants of a response, in its order.

    >>> loose_variants("Sure!\\n*hi*\\nBye")[:3]
    ['Sure!\\n*hi*\\nBye', 'Sure!\\nhi\\nBye', '*hi*\\nBye']
    """
    lines = response.split("\n")
    cut = ["\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return [response, response.replace("*", ""), *cut, *(c.replace("*", "") for c in cut)]


def _as_list(value: Any, what: str) -> list[Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as err:
            raise BadKwargs(f"{what} is not valid JSON: {err}") from None
    if hasattr(value, "tolist"):  # numpy / arrow arrays from dataframes
        value = value.tolist()
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise BadKwargs(f"{what} must be a list, got {type(value).__name__}")
    return list(value)


def bind_instructions(instruction_ids: Any, kwargs: Any) -> list[tuple[str, Callable[[str], bool]]]:
    """Validate a row's instructions once; return `(id, text -> followed)` pairs.

    Raises UnknownInstruction for ids outside the 25 types and BadKwargs for malformed
    kwargs (including a kwargs list of a different length than the ids)."""
    ids = [str(i) for i in _as_list(instruction_ids, "instruction_id_list")]
    unknown = [i for i in ids if i not in INSTRUCTIONS]
    if unknown:
        raise UnknownInstruction(",".join(unknown))
    kw_list = _as_list(kwargs, "kwargs") if kwargs is not None else [{}] * len(ids)
    if len(kw_list) != len(ids):
        raise BadKwargs(f"{len(kw_list)} kwargs dicts for {len(ids)} instructions")
    bound = []
    for iid, kw in zip(ids, kw_list):
        if kw is not None and not isinstance(kw, dict):
            raise BadKwargs(f"{iid}: kwargs must be a dict, got {type(kw).__name__}")
        bound.append((iid, INSTRUCTIONS[iid].bind(kw)))
    return bound


def follow_list(response: str, bound: list[tuple[str, Callable[[str], bool]]], mode: str = "strict") -> list[bool]:
    """Per instruction, whether `response` follows it (an empty variant never does)."""
    variants = [response] if mode == "strict" else loose_variants(response)
    variants = [v for v in variants if v.strip()]
    return [any(check(v) for v in variants) for _, check in bound]


class IFEvalReward(Reward):
    """IFEval instruction-following reward (strict|loose, prompt|instruction level).

    >>> reward = IFEvalReward()
    >>> ids = [["punctuation:no_comma", "keywords:existence"]] * 2
    >>> kw = [[{}, {"keywords": ["autumn"]}]] * 2
    >>> reward(["Write a haiku."] * 2, ["<think>Hmm, ok</think>Autumn leaves fall", "Leaves, falling"],
    ...        instruction_id_list=ids, kwargs=kw)
    [1.0, 0.0]
    >>> r = reward.score([None], ["Leaves, falling"], instruction_id_list=ids[:1], kwargs=kw[:1])[0]
    >>> r.reason
    'instruction_not_followed:punctuation:no_comma,keywords:existence'
    >>> IFEvalReward(level="instruction")([None], ["Autumn, again"], instruction_id_list=ids[:1], kwargs=kw[:1])
    [0.5]
    >>> reward.score([None], ["hi"], instruction_id_list=[["made:up"]], kwargs=[[{}]])[0].reason
    'unknown_instruction'
    """

    name = "ifeval"

    def __init__(self, mode: Literal["strict", "loose"] = "strict", level: Literal["prompt", "instruction"] = "prompt",
                 config: IFEvalConfig | None = None) -> None:
        self.config = config or IFEvalConfig(mode=mode, level=level)  # type: ignore[arg-type]

    def version_options(self) -> str:
        return f"{self.config.mode}-{self.config.level}"

    def _score_one(self, prompt: Any, completion: str, row: dict[str, Any]) -> RewardResult:
        return self.check(answer_text(completion), row.get("instruction_id_list"), row.get("kwargs"))

    def check(self, response: str, instruction_ids: Any, kwargs: Any) -> RewardResult:
        """Score one already-extracted response against its instructions."""
        try:
            bound = bind_instructions(instruction_ids, kwargs)
        except UnknownInstruction as err:
            return RewardResult(0.0, "unknown_instruction", True, f"unknown instruction ids: {err.args[0]}")
        except BadKwargs as err:
            return RewardResult(0.0, "bad_kwargs", True, str(err))
        if not bound:
            return RewardResult(0.0, "no_instructions", True, "instruction_id_list is empty or missing")
        if len(response) > MAX_RESPONSE_CHARS:
            return RewardResult(0.0, "response_too_long", detail=f"{len(response)} characters")
        response = visible_text(response)
        if not has_content(response):
            return RewardResult(0.0, "empty_response")
        followed = follow_list(response, bound, self.config.mode)
        missed = [iid for (iid, _), ok in zip(bound, followed) if not ok]
        if self.config.level == "instruction":
            score = sum(followed) / len(followed)
        else:
            score = 0.0 if missed else 1.0
        if not missed:
            return RewardResult(score, "correct")
        return RewardResult(score, "instruction_not_followed:" + ",".join(missed),
                            detail=f"{len(followed) - len(missed)}/{len(followed)} followed")


def _group_key(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return json.dumps(prompt, sort_keys=True, default=str)


def group_zscores(values: Sequence[float]) -> list[float]:
    """z-scores with the population std; all zeros when the std is 0.

    >>> group_zscores([1.0, 3.0])
    [-1.0, 1.0]
    >>> group_zscores([2.0, 2.0])
    [0.0, 0.0]
    """
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [0.0] * len(values) if std == 0 else [(v - mean) / std for v in values]


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


class IFEvalRMReward(Reward):
    """Thinking-mode IF-RL reward: `R_IF + sigmoid(z_RM)` when `R_IF = 1`, else 0.

    `R_IF` is the prompt-level IFEval verdict (`mode` strict|loose); `z_RM` is the reward
    model's score z-normalised over the completions of the batch that share a prompt.

    >>> rm = lambda prompts, responses: [float(len(r)) for r in responses]  # a fake RM
    >>> reward = IFEvalRMReward(scorer=rm)
    >>> ids, kw = [["punctuation:no_comma"]] * 3, [[{}]] * 3
    >>> [round(x, 3) for x in reward(["p"] * 3, ["<think>..</think>short", "a longer answer", "no, comma"],
    ...                                instruction_id_list=ids, kwargs=kw)]
    [1.243, 1.785, 0.0]
    """

    name = "ifeval_rm"
    batch_dependent = True  # the RM part is normalised over the batch: never cached per completion

    def __init__(self, scorer: Scorer | None = None, model_path: str | None = None,
                 mode: Literal["strict", "loose"] = "strict", config: IFEvalConfig | None = None) -> None:
        if scorer is None and model_path is None:
            raise ValueError("IFEvalRMReward needs a scorer callable or a reward model_path")
        self._if = IFEvalReward(config=IFEvalConfig(mode=(config.mode if config else mode), level="prompt"))  # type: ignore[arg-type]
        self._scorer = scorer
        self.model_path = model_path

    def version_options(self) -> str:
        rm = f"rm={self.model_path}" if self.model_path else "rm=injected"
        return f"{self._if.config.mode}-{rm}"

    def scorer(self) -> Scorer:
        """The reward-model scorer, built from `model_path` on first use."""
        if self._scorer is None:
            from rewards.reward_model import RewardModelScorer

            built = RewardModelScorer(self.model_path)
            # B1's scorer is a callable `(prompts, responses) -> scores`; accept `.score` too.
            self._scorer = built if callable(built) else built.score
        return self._scorer

    def _score_batch(self, prompts: list[Any], completions: list[str], columns: dict[str, list]) -> list[RewardResult]:
        results = self._if.score(prompts, completions, **columns)
        groups: dict[str, list[int]] = {}
        for i in range(len(completions)):
            groups.setdefault(_group_key(prompts[i] if i < len(prompts) else None), []).append(i)
        for members in groups.values():
            if any(results[i].score == 1.0 for i in members):  # RM only where someone passed
                self._blend(members, prompts, completions, results)
        return results

    def _blend(self, members: list[int], prompts: list[Any], completions: list[str],
               results: list[RewardResult]) -> None:
        group_prompts = [prompts[i] if i < len(prompts) else None for i in members]
        responses = [answer_text(completions[i]) for i in members]
        try:
            raw = [float(s) for s in self.scorer()(group_prompts, responses)]
            if len(raw) != len(members) or not all(math.isfinite(s) for s in raw):
                raise ValueError(f"reward model returned {raw!r} for {len(members)} responses")
        except Exception as err:  # noqa: BLE001 - contract: report, never raise
            for i in members:
                if results[i].score == 1.0:
                    results[i] = RewardResult(0.0, "reward_model_error", True, f"{type(err).__name__}: {err}")
            return
        for i, s, z in zip(members, raw, group_zscores(raw)):
            if results[i].score == 1.0:
                results[i] = RewardResult(1.0 + _sigmoid(z), "correct", detail=f"rm={s:.4g} z={z:.3f}")
