"""The stage-kind registry: everything a kind of stage means, declared in one place.

A `StageKind` says which recipe section declares it (`family`), which source domains feed it
(the first is its own domain), which prompt columns its verifiers read, which rewards it uses
when the recipe names none, which held-out eval domains it trains and which reward scores each
one, and everything kind-specific about training it: its trainer class, its run-config class,
the model of its `options:` block (spec.train.StageOptions) and the backends it runs on. The
recipe validator, the prompt-set builder, the checkpoint and eval assets and the evaluator all
read it; nothing else keeps a per-kind table or branches on a kind's name.

Adding a kind: write one module that builds a `StageKind` and calls `register_stage_kind` (the
registration line), and import that module before the recipe is loaded. See docs/recipe.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from spec.train import MixOptions, MOPDSettings, StageOptions

Family = Literal["sft", "reward_model", "rl"]

DOMAINS = ("chat", "math", "code", "science", "instruction", "tool", "swe", "preference",
           "mcqa", "structured_output", "tool_call")
"""Canonical row domains; each has one pyarrow schema in curation.schemas (the last three: Cascade 2's
multi-domain RL: multiple-choice QA, JSON-schema structured output, tool calls with a reference call)."""

STAGE_ORDERS: dict[str, tuple[str, ...]] = {
    "cascade1": ("rlhf", "if", "math", "code", "swe"),
    "cascade2": ("if", "multi_domain", "mopd", "rlhf", "math", "code", "swe"),
}
"""RL kind order of each published recipe (`stage_order:`): Cascade 1 (arXiv 2512.13607) and Cascade 2
(arXiv 2603.19220; its long-context RL stage is a `math` stage with a longer budget). Kinds not listed
may go anywhere; `cascade` is `cascade1`."""


@dataclass(frozen=True)
class StageKind:
    """One kind of cascade stage."""

    name: str
    """The recipe's `kind:` value (sft and reward_model are implied by their sections)."""
    family: Family
    """Recipe section and typed `train:` block: sft -> SFTSettings, reward_model -> RMSettings, rl -> GRPOSettings."""
    source_domains: tuple[str, ...]
    """Canonical source domains its data may come from; the first is the kind's own domain."""
    trainer: str
    """`module:Class` of its trainer. sft and rl kinds: a trainer.base.Trainer that trainer.stage runs on the
    stage's backend (`trainer.stage.run_stage(config, trainer)`); reward_model kinds: the function
    (policy, preference table, output folder, RMConfig) that trains the reward model."""
    prompt_columns: tuple[str, ...] = ()
    """RL prompt-set columns its verifiers read besides `prompt`; a row missing one is dropped."""
    default_rewards: tuple[str, ...] = ()
    """Rewards a stage of this kind uses when the recipe lists none."""
    eval_domain: str | None = None
    """Held-out eval domain this kind trains (a forgetting-matrix row); None: no eval of its own."""
    eval_reward: str | None = None
    """Reward that scores `eval_domain` (an eval benchmark's `eval_domain` picks it)."""
    extra_eval_domains: tuple[tuple[str, str], ...] = ()
    """Further held-out eval domains the kind trains, as (eval domain, reward that scores it) pairs,
    besides `eval_domain` (a multi-domain stage learns several; each is a forgetting-matrix row)."""
    description: str = ""
    """One line for the UI and the docs."""
    cascade_position: int | None = None
    """Place in the Cascade RL order (RLHF 1 → IF 2 → math 3 → code 4 → SWE 5): a recipe lists its RL
    stages in this order unless it sets `stage_order: custom`; None (a kind you add) may go anywhere."""
    rewards_optional: bool = False
    """The stage trains without rewards (MOPD: the teachers give the signal); rewards it lists are only monitored."""
    config: str = "trainer.config:GRPOConfig"
    """`module:Class` of the run config the checkpoint asset builds for it (rl kinds: a GRPOConfig subclass)."""
    options: type[StageOptions] | None = None
    """Model of the stage's `options:` block (a spec.train.StageOptions subclass); None: the kind takes none."""
    backends: tuple[str, ...] = ()
    """Training backends its trainer runs on; empty: every backend that runs its algorithm."""

    @property
    def domain(self) -> str:
        """The kind's own canonical domain (eval rows of its eval domain map from it)."""
        return self.source_domains[0]

    @property
    def eval_domains(self) -> list[str]:
        """Every held-out eval domain the kind trains: `eval_domain` first, then the extras; [] when none."""
        return ([self.eval_domain] if self.eval_domain else []) + [d for d, _ in self.extra_eval_domains]

    def reward_for(self, domain: str) -> str | None:
        """The reward that scores eval `domain` of this kind (None: not one of its eval domains)."""
        if domain == self.eval_domain:
            return self.eval_reward
        return dict(self.extra_eval_domains).get(domain)


_KINDS: dict[str, StageKind] = {}


class UnknownStageKindError(ValueError):
    """A stage kind that is not registered."""


def register_stage_kind(kind: StageKind, replace: bool = False) -> StageKind:
    """Add `kind` to the registry (a second kind with the same name is an error unless `replace`)."""
    if not replace and kind.name in _KINDS and _KINDS[kind.name] != kind:
        raise ValueError(f"stage kind {kind.name!r} is already registered")
    if kind.eval_domain and (kind.eval_reward is None):
        raise ValueError(f"stage kind {kind.name!r}: eval_domain needs an eval_reward")
    if kind.extra_eval_domains and not kind.eval_domain:
        raise ValueError(f"stage kind {kind.name!r}: extra_eval_domains need an eval_domain")
    mine = kind.eval_domains
    if len(set(mine)) != len(mine):
        raise ValueError(f"stage kind {kind.name!r}: eval domains repeat: {mine}")
    for other in _KINDS.values():
        shared = [d for d in mine if d in other.eval_domains] if other.name != kind.name else []
        if shared:
            raise ValueError(f"stage kind {kind.name!r}: eval domain {shared[0]!r} belongs to {other.name!r}")
    _KINDS[kind.name] = kind
    return kind


def unregister_stage_kind(name: str) -> None:
    """Remove a kind (tests that register toy kinds clean up with this)."""
    _KINDS.pop(name, None)


def stage_kind(name: str) -> StageKind:
    """The registered kind called `name`."""
    if name not in _KINDS:
        raise UnknownStageKindError(f"unknown stage kind {name!r}; known: {', '.join(sorted(_KINDS))}")
    return _KINDS[name]


def stage_kinds(family: Family | None = None) -> list[StageKind]:
    """Registered kinds (of one family), in registration order."""
    return [k for k in _KINDS.values() if family is None or k.family == family]


def eval_reward_for(domain: str) -> str:
    """The reward that scores held-out `domain` (its kind's `eval_reward` or the extra pair's reward)."""
    reward = kind_for_eval_domain(domain).reward_for(domain)
    assert reward is not None  # registration guarantees every eval domain has a reward
    return reward


def kind_for_eval_domain(domain: str) -> StageKind:
    """The kind that trains held-out `domain`."""
    for kind in _KINDS.values():
        if domain in kind.eval_domains:
            return kind
    known = sorted(d for k in _KINDS.values() for d in k.eval_domains)
    raise UnknownStageKindError(f"no stage kind trains eval domain {domain!r}; known: {', '.join(known)}")


_GRPO = "trainer.grpo:GRPOTrainer"

# The Cascade RL kinds (docs/cascade_rl.md#stage-order): SFT, the reward model, then the RL stages.
register_stage_kind(StageKind(
    "sft", "sft", ("chat", "math", "code", "science", "instruction", "tool", "swe"), "trainer.sft:SFTTrainer",
    config="trainer.config:SFTConfig",
    description="Supervised fine-tuning on a blended corpus (assistant-only loss)."))
register_stage_kind(StageKind(
    "reward_model", "reward_model", ("preference",), "rewards.reward_model:train_reward_model",
    config="rewards.reward_model:RMConfig",
    description="Bradley-Terry scalar reward model trained on preference pairs."))
register_stage_kind(StageKind(
    "rlhf", "rl", ("chat", "preference"), _GRPO, default_rewards=("rm",), eval_domain="rm", eval_reward="rm", cascade_position=1,
    description="RLHF: GRPO against the reward model."))
register_stage_kind(StageKind(
    "if", "rl", ("instruction",), _GRPO, prompt_columns=("instruction_id_list", "kwargs"),
    default_rewards=("ifeval",), eval_domain="ifeval", eval_reward="ifeval", cascade_position=2,
    description="Instruction-following RL with IFEval-style verifiers."))
register_stage_kind(StageKind(
    "math", "rl", ("math", "science"), _GRPO, prompt_columns=("answer",), default_rewards=("math",),
    eval_domain="math", eval_reward="math", cascade_position=3, description="Math RL with a symbolic answer verifier."))
register_stage_kind(StageKind(
    "code", "rl", ("code",), _GRPO, prompt_columns=("tests",), default_rewards=("code",),
    eval_domain="code", eval_reward="code", cascade_position=4, description="Code RL: sandboxed unit tests."))
register_stage_kind(StageKind(
    "swe", "rl", ("swe",), _GRPO, prompt_columns=("golden_patch", "code_context"), default_rewards=("swe",),
    eval_domain="swe", eval_reward="swe", cascade_position=5, description="SWE RL: execution-free patch similarity."))
register_stage_kind(StageKind(
    "multi_domain", "rl", ("mcqa", "tool_call", "structured_output"), "trainer.multi_domain:MultiDomainTrainer",
    default_rewards=("mcqa", "tool_call", "structured_output"), config="trainer.multi_domain:MultiDomainConfig",
    options=MixOptions, backends=("torch",),
    eval_domain="mcqa", eval_reward="mcqa",
    extra_eval_domains=(("tool_call", "tool_call"), ("structured_output", "structured_output")),
    description="Cascade 2 multi-domain RL: one GRPO stage over a mix of domains (`options: {mix: ...}`), a reward per domain."))
register_stage_kind(StageKind(
    "mopd", "rl", ("math", "chat", "instruction", "science", "code", "mcqa", "tool_call", "structured_output"),
    "trainer.mopd:MOPDTrainer", rewards_optional=True, config="trainer.mopd:MOPDConfig",
    options=MOPDSettings, backends=("torch",),
    description="Cascade 2 multi-domain on-policy distillation: per-token reverse-KL advantage from each "
                "domain's teacher checkpoint (`options: {teachers: ...}`)."))
