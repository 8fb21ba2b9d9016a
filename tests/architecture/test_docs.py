"""The docs stay true: reference sections generated from the typed models are current
(regenerate them, never hand-edit), the README's quick start is the two commands, every `make`
target the docs name exists, and the README's file tree names only what is there.

`python tests/architecture/test_docs.py` rewrites docs/trainer.md's generated section
(docs/recipe.md's is rewritten by `python -m spec.docs`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("spec", "curation", "sandboxes", "rewards", "generation", "trainer", "assets", "dagster_project")
TRAINER_DOC = ROOT / "docs" / "trainer.md"
BEGIN = ("<!-- BEGIN GENERATED from trainer.config (`python tests/architecture/test_docs.py` rewrites it);"
         " edit the config models, not this -->")
END = "<!-- END GENERATED -->"


def _between_markers(text: str) -> tuple[int, int]:
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return start, end


def _section(text: str, heading: str) -> str:
    """The body of the README section `## heading`, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README.md has no `## {heading}` section"
    return match.group(1)


def test_recipe_reference_is_current() -> None:
    from spec.docs import generated_section, recipe_reference_markdown

    assert generated_section((ROOT / "docs" / "recipe.md").read_text()) == recipe_reference_markdown().strip("\n"), (
        "docs/recipe.md's reference is stale: run `python -m spec.docs`")


def test_trainer_reference_is_current() -> None:
    from trainer.config import config_reference_markdown

    text = TRAINER_DOC.read_text()
    start, end = _between_markers(text)
    assert text[start:end].strip("\n") == config_reference_markdown().strip("\n"), (
        "docs/trainer.md's reference is stale: run `python tests/architecture/test_docs.py`")


def test_quick_start_is_the_two_commands() -> None:
    quick = _section((ROOT / "README.md").read_text(), "Quick start")
    block = re.search(r"```bash\n(.*?)```", quick, re.S)
    assert block, "the Quick start has no ```bash block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.split("#")[0].strip()]
    assert commands == ["make run", "make test"], commands


def test_every_make_target_named_in_the_docs_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    named: dict[str, str] = {}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"`make ([\w-]+)", doc.read_text()):
            named.setdefault(target, doc.relative_to(ROOT).as_posix())
    assert named, "no `make ...` found in the docs: the pattern is broken"
    unknown = {t: where for t, where in named.items() if t not in targets}
    assert not unknown, f"`make` targets the docs name but the Makefile lacks: {unknown}"


def test_readme_file_tree_is_true() -> None:
    """Each line of the README's file tree starts with a path that exists, and every package is in it."""
    tree = re.search(r"```text\n(.*?)```", _section((ROOT / "README.md").read_text(), "File structure"), re.S)
    assert tree, "the README's File structure has no ```text block"
    paths = [line.split()[0] for line in tree.group(1).splitlines() if line.strip() and not line.startswith(" ")]
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"the README's file tree names what does not exist: {missing}"
    assert {f"{p}/" for p in PACKAGES} <= set(paths), f"packages missing from the tree: {set(PACKAGES) - {p.rstrip('/') for p in paths}}"


if __name__ == "__main__":  # regenerate docs/trainer.md's reference section
    sys.path.insert(0, str(ROOT))
    from trainer.config import config_reference_markdown

    text = TRAINER_DOC.read_text()
    start, end = _between_markers(text)
    TRAINER_DOC.write_text(text[:start] + "\n" + config_reference_markdown().strip("\n") + "\n" + text[end:])
    print(f"updated {TRAINER_DOC}")
