"""Multi-domain RL (Cascade 2, arXiv 2603.19220): one GRPO stage over a mix of domains.

The stage is GRPO as trainer.grpo runs it, with one change: the prompt stream. Instead of one
shuffled order over every prompt, `DomainMixOrder` keeps a seeded order per domain (the prompt
set's `domain` column) and draws each next prompt from the domain furthest below its share of
the prompts drawn so far, so every step's batch follows the recipe's `mix:` (default: the
paper's 55% MCQA, 30% tool use, 15% structured output) as closely as integer counts allow, and
the cumulative counts never drift by more than one prompt per domain. Rewards are per domain
(rewards.multi_domain): each scores its own rows and leaves the others `None`, so the weighted
sum is each row's own verifier.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Sequence

from pydantic import Field

from spec.train import DEFAULT_MIX
from trainer.checkpointing import DataOrder
from trainer.config import GRPOConfig
from trainer.grpo import GRPOTrainer

__all__ = ["DomainMixOrder", "MultiDomainConfig", "MultiDomainTrainer"]


class MultiDomainConfig(GRPOConfig):
    """A multi-domain GRPO stage: GRPOConfig plus the domain mix of its batches."""

    trainer_class: ClassVar[str] = "trainer.multi_domain:MultiDomainTrainer"

    backend: Literal["torch"] = "torch"
    """Training backend (the multi-domain prompt stream is built for the torch backend)."""
    mix: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_MIX))
    """Domain -> share of the prompts of every batch (normalised over the domains named)."""


class DomainMixOrder:
    """Prompts drawn per domain in fixed shares: a DataOrder per domain, picked by largest deficit.

    Same interface as trainer.checkpointing.DataOrder where GRPOTrainer uses it (`take`,
    `retire`, `retired`, `active`, `epoch`, `state_dict`): items are global prompt indices.
    """

    def __init__(self, domains: Sequence[str], mix: dict[str, float], seed: int,
                 strata: Sequence[str] | None = None):
        present = sorted(set(domains))
        missing = [d for d in mix if d not in present]
        if missing:
            raise ValueError(f"mix names domains with no prompts: {missing} (prompt set domains: {present})")
        unmixed = [d for d in present if d not in mix]
        if unmixed:
            raise ValueError(f"prompt set has domains the mix does not name: {unmixed} (mix: {sorted(mix)})")
        total = sum(mix.values())
        self.names = sorted(mix)
        self.share = {d: mix[d] / total for d in self.names}
        self.items = {d: [i for i, x in enumerate(domains) if x == d] for d in self.names}
        self.orders = {d: DataOrder(len(self.items[d]), seed + k, strata=[strata[i] for i in self.items[d]]
                                    if strata else None) for k, d in enumerate(self.names)}
        self.drawn = {d: 0 for d in self.names}

    @property
    def epoch(self) -> int:
        return min(o.epoch for o in self.orders.values())

    @property
    def retired(self) -> dict[int, int]:
        return {self.items[d][i]: e for d, o in self.orders.items() for i, e in o.retired.items()}

    def active(self, epoch: int | None = None) -> list[int]:
        return sorted(self.items[d][i] for d, o in self.orders.items() for i in o.active(epoch))

    def retire(self, items: list[int]) -> None:
        local = {g: (d, k) for d, ids in self.items.items() for k, g in enumerate(ids)}
        for g in items:
            d, k = local[int(g)]
            self.orders[d].retire([k])

    def counts(self, k: int) -> dict[str, int]:
        """How many of the next `k` prompts each domain gives (largest deficit first, ties by name)."""
        drawn, out = dict(self.drawn), {d: 0 for d in self.names}
        for _ in range(k):
            total = sum(drawn.values()) + 1
            pick = max(self.names, key=lambda d: (self.share[d] * total - drawn[d], -self.names.index(d)))
            drawn[pick] += 1
            out[pick] += 1
        return out

    def take(self, k: int) -> list[int]:
        """The next k global prompt indices, the domains in their shares."""
        out: list[int] = []
        for d, n in self.counts(k).items():
            if n:
                out += [self.items[d][i] for i in self.orders[d].take(n)]
                self.drawn[d] += n
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"drawn": dict(self.drawn), "orders": {d: o.state_dict() for d, o in self.orders.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.drawn = {d: int(state["drawn"][d]) for d in self.names}
        for d, o in self.orders.items():
            o.load_state_dict(state["orders"][d])


class MultiDomainTrainer(GRPOTrainer):
    """GRPO whose prompt stream follows the domain mix (everything else is GRPOTrainer's)."""

    algorithm = "multi_domain"

    def __init__(self, config: MultiDomainConfig, tokenizer: Any, world_size: int = 1, rank: int = 0):
        super().__init__(config, tokenizer, world_size=world_size, rank=rank)
        domains = [str(r.get("domain")) for r in self.rows]
        self.order = DomainMixOrder(domains, dict(config.mix), config.seed,
                                    strata=self.modes if config.balance_modes else None)

    def summary(self) -> dict[str, Any]:
        return super().summary() | {"mix": dict(self.order.share), "drawn": dict(self.order.drawn)}

