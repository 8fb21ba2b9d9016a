"""The trainer contract: what the training loop needs from every trainer, and the base they share.

Three parts split a stage's work. A trainer (this contract) owns its data and one optimizer step;
the loop (trainer.stage.execute) owns resume, the step loop, periodic checkpoints and the output folder; a
backend (trainer.backend_api.Backend) owns the model, the optimizer and the collectives. A stage
kind names its trainer class (spec.kinds.StageKind.trainer) and its run-config class; the loop
builds the trainer as `cls(config, tokenizer, world_size=, rank=)`, calls `attach(backend)`, then
`train_step(step)` for each step, `state_dict`/`load_state_dict` around checkpoints and `summary`
(plus `reward_records` when the trainer scores rewards) for the lineage record.

`algorithm` names what a trainer runs (`sft`, `grpo`, `mopd`, `multi_domain`): the word in its log
lines and lineage record, and what a backend may restrict itself to
(trainer.stage.ALGORITHMS). It is not a stage kind: the rlhf, if, math, code and swe
kinds all run `grpo`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from trainer.backend_api import Backend
    from trainer.config import RunFields

ConfigT = TypeVar("ConfigT", bound="RunFields")


@runtime_checkable
class Trainer(Protocol):
    """What trainer.stage.execute calls on a trainer (and `close()`, when it has one, once the run ends
    or fails: it stops what the trainer started, such as rollout worker processes)."""

    algorithm: ClassVar[str]
    progress_keys: ClassVar[tuple[str, ...]]
    total_steps: int

    def attach(self, backend: Backend) -> None:
        """Take the backend that owns the model (called once, before the first step)."""

    def train_step(self, step: int) -> dict[str, float]:
        """Run optimizer step `step` (0-based); return its metrics."""

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs besides the model and optimizer (the data order)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` from a checkpoint."""

    def summary(self) -> dict[str, Any]:
        """The run's totals for its lineage record."""


class TrainerBase(Generic[ConfigT]):
    """Shared state of the built-in trainers: the config, tokenizer, rank, the pad id, the attached
    backend, and a resumable data order (`self.order`, set by the subclass)."""

    algorithm: ClassVar[str] = ""
    progress_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: ConfigT, tokenizer: Any, world_size: int = 1, rank: int = 0):
        self.config, self.tokenizer, self.world_size, self.rank = config, tokenizer, world_size, rank
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.backend: Backend | None = None
        self.total_steps = 0
        self.order: Any = None  # a resumable data order: state_dict/load_state_dict (trainer.checkpointing.DataOrder)

    def attach(self, backend: Backend) -> None:
        self.backend = backend

    def train_step(self, step: int) -> dict[str, float]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {"data_order": self.order.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.order.load_state_dict(state["data_order"])

    def summary(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        """Stop what attach started (nothing here)."""
