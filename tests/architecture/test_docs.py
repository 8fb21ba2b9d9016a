"""Reference docs generated from the typed models are current (regenerate them, never hand-edit)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_recipe_reference_is_current() -> None:
    from spec.docs import generated_section, recipe_reference_markdown

    assert generated_section((ROOT / "docs" / "recipe.md").read_text()) == recipe_reference_markdown().strip("\n"), (
        "docs/recipe.md's reference is stale: run `python -m spec.docs`")


def test_readme_trainer_tables_are_current() -> None:
    from trainer.config import config_reference_markdown

    readme = (ROOT / "README.md").read_text()
    stale = [line for line in config_reference_markdown().splitlines() if line.startswith("| `") and line not in readme]
    assert not stale, "README's trainer tables are stale (paste trainer.config.config_reference_markdown()):\n" + "\n".join(stale)
