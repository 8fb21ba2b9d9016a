"""Reference tables generated from the typed models, so the docs cannot drift from the code.

`fields_table(model)` renders one pydantic model (field, type, default, meaning from the field's
docstring); `recipe_reference_markdown()` renders every block of the recipe, the typed `train:`
blocks and the registered stage kinds. docs/recipe.md is a hand-written guide followed by that
reference between two markers; `python -m spec.docs` rewrites only the part between them (a test
checks it is current).
"""

from __future__ import annotations

import json
import typing
from typing import Any

from pydantic import BaseModel


def _type_name(annotation: Any) -> str:
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return text.replace("typing.", "").replace("spec.train.", "").replace("spec.recipe.", "").replace("|", "\\|")


def _default(info: Any) -> str:
    if info.is_required():
        return "**required**"
    value = info.default_factory() if info.default_factory else info.default
    if isinstance(value, BaseModel):
        return "`{}`"
    return f"`{json.dumps(value, default=str)}`"


def fields_table(model: type[BaseModel]) -> str:
    """Markdown table of a model's fields: name, type, default, meaning."""
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        desc = (info.description or "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{name}` | `{_type_name(info.annotation)}` | {_default(info)} | {desc} |")
    return "\n".join(rows)


def _blocks(model: type[BaseModel], path: str, seen: set[type]) -> list[tuple[str, type[BaseModel]]]:
    """(path, model) for `model` and every nested model block, depth first, each once."""
    if model in seen:
        return []
    seen.add(model)
    out = [(path, model)]
    for name, info in model.model_fields.items():
        for arg in [info.annotation, *typing.get_args(info.annotation)]:
            for inner in [arg, *typing.get_args(arg)]:
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    many = typing.get_origin(arg) is list
                    child = (f"{path}." if path else "") + name + ("[]" if many else "")
                    out += _blocks(inner, child, seen)
    return out


def recipe_reference_markdown() -> str:
    """docs/recipe.md: every recipe block and field, generated from spec.recipe and spec.kinds."""
    from spec.kinds import eval_reward_for, stage_kinds
    from spec.recipe import Recipe

    out = ["# Recipe reference", "",
           "A recipe is one YAML file. Every block below is a typed model: unknown keys, wrong types and "
           "out-of-range values fail when the recipe is loaded, each reported with its field path "
           "(e.g. `rl_stages.2.train.learning_rate`), before anything runs. Reward options are checked "
           "against each reward's own option model at the same time.", "",
           "## Stage kinds", "",
           "Registered in `spec/kinds.py`. An RL stage's `kind:` picks one; `sft_stages` and "
           "`reward_model` are the `sft` and `reward_model` kinds.", "",
           "| kind | family | source domains | prompt columns | default rewards | eval domains (reward) | trainer | options |",
           "|---|---|---|---|---|---|---|---|"]
    for k in stage_kinds():
        evald = ", ".join(f"{d} ({eval_reward_for(d)})" for d in k.eval_domains) or "–"
        options = f"`{k.options.__name__}`" if k.options else "–"
        out.append(f"| `{k.name}` | {k.family} | {', '.join(k.source_domains)} | {', '.join(k.prompt_columns) or '–'} "
                   f"| {', '.join(k.default_rewards) or '–'} | {evald} | `{k.trainer}` | {options} |")
    out += ["", "### Adding a stage kind", "",
            "One module plus one registration line; import the module before the recipe is loaded "
            "(for example from your own Dagster code location):", "", "```python",
            "from spec.kinds import StageKind, register_stage_kind", "",
            "register_stage_kind(StageKind(",
            '    "geometry", "rl", source_domains=("math",), trainer="trainer.grpo:GRPOTrainer",',
            '    prompt_columns=("answer",), default_rewards=("math",),',
            '    description="GRPO on geometry problems."))',
            "```", "",
            "The recipe then accepts `kind: geometry`; the prompt set, the checkpoint asset, the lineage "
            "and the evals read everything else from the registry. A kind with its own training step names "
            "its trainer class (a `trainer.base.TrainerBase` subclass), its run-config class (`config=`, a "
            "`trainer.config.GRPOConfig` subclass with the extra fields) and the model of its `options:` block "
            "(`options=`, a `spec.train.StageOptions` subclass; its `run_fields` fill the run config, its "
            "`checkpoints` name other checkpoint stages the stage reads, its `problems` check them at load); "
            "`tests/architecture/test_external_stage_kind.py` registers such a kind from outside the packages "
            "and materializes it. A kind with an `eval_domain` (and any "
            "`extra_eval_domains`, (domain, reward) pairs) also gets a forgetting-matrix row for each one a "
            "benchmark declares as its `eval_domain`.", ""]
    for path, model in _blocks(Recipe, "", set()):
        title = f"`{path}`" if path else "Top level"
        out += [f"## {title}", "", (model.__doc__ or "").strip().splitlines()[0], "", fields_table(model), ""]
    for k in stage_kinds():
        if k.options is not None:
            out += [f"## `rl_stages[].options` of `kind: {k.name}` ({k.options.__name__})", "",
                    (k.options.__doc__ or "").strip().splitlines()[0], "", fields_table(k.options), ""]
    return "\n".join(out)


BEGIN, END = ("<!-- BEGIN GENERATED by `python -m spec.docs` from the typed models in spec/; edit those, not this -->",
              "<!-- END GENERATED -->")


def generated_section(text: str) -> str:
    """The part of a document between the generation markers."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip("\n")


def with_reference(text: str) -> str:
    """`text` with its generated section replaced by the current reference."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + recipe_reference_markdown().strip("\n") + "\n" + text[end:]


if __name__ == "__main__":
    from spec.paths import REPO_ROOT

    doc = REPO_ROOT / "docs" / "recipe.md"
    doc.write_text(with_reference(doc.read_text()))
    print(f"updated {doc}")
