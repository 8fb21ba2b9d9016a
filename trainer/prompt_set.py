"""The prompts a GRPO stage trains on, shared by every backend (torch, DeepSpeed ranks, the TRL plug).

An RL prompt parquet becomes rows with a reasoning mode each (GRPOConfig.mode), rendered as ChatML
by curation.chat and tokenized; prompts over max_prompt_tokens are counted and left out. Their
order is a trainer.checkpointing.DataOrder, so the same seed gives every backend the same prompt
stream, with half /think and half /no_think prompts per step when the set mixes modes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from trainer.checkpointing import DataOrder


def row_modes(modes: Sequence[str | None], mode_option: str) -> list[str]:
    """The reasoning mode of each prompt under GRPOConfig.mode (row | think | no_think | alternate)."""
    if mode_option == "row":
        return [m if m in ("think", "no_think") else "think" for m in modes]
    if mode_option == "alternate":
        return ["think" if i % 2 == 0 else "no_think" for i in range(len(modes))]
    return [mode_option] * len(modes)


@dataclass
class PromptSet:
    """The usable prompts of an RL prompt parquet, as every GRPO backend trains on them."""

    rows: list[dict[str, Any]]
    modes: list[str]
    texts: list[str]
    """Rendered ChatML prompts (system turn, user turn with its mode suffix, assistant header)."""
    token_ids: list[list[int]]
    skipped_long: int
    """Prompts left out because they render to more than max_prompt_tokens."""

    def order(self, config: Any) -> DataOrder:
        """The prompt stream: seeded epochs, half /think and half /no_think when `balance_modes`."""
        return DataOrder(len(self.rows), config.seed, strata=self.modes if config.balance_modes else None)


def load_prompt_set(config: Any, tokenizer: Any) -> PromptSet:
    """Read, render and tokenize `config.dataset`; prompts over max_prompt_tokens are counted and left out."""
    import pyarrow.parquet as pq

    from curation.chat import render_prompt

    rows = pq.read_table(config.dataset).to_pylist()
    kept = PromptSet([], [], [], [], 0)
    for row, mode in zip(rows, row_modes([r.get("mode") for r in rows], config.mode)):
        text = render_prompt(row["prompt"], mode, config.system_prompt, row.get("tools"))
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) > config.max_prompt_tokens:
            kept.skipped_long += 1
            continue
        kept.rows.append(row)
        kept.modes.append(mode)
        kept.texts.append(text)
        kept.token_ids.append(ids)
    if not kept.rows:
        raise ValueError(f"{config.dataset}: no usable prompts ({kept.skipped_long} over max_prompt_tokens)")
    return kept
