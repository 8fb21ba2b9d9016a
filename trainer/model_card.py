"""Model cards: a Hugging Face README.md in every checkpoint folder.

What: YAML front matter (library_name, base_model, pipeline_tag, tags) and a body naming the
stage and its kind, the base model it descends from, the recipe excerpt that shaped it, the
data versions it was trained on, how to load it (AutoModelForCausalLM + apply_chat_template
alone, with the /think and /no_think modes) and, once the checkpoint is evaluated, its eval
table. Why: a checkpoint folder is what people copy out of `$CASCADE_HOME`; the card makes it
self-describing without the platform.

The eval section sits between markers, so re-evaluating rewrites it in place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

CARD_FILE = "README.md"
EVAL_START, EVAL_END = "<!-- cascade-eval-start -->", "<!-- cascade-eval-end -->"


def _front_matter(base_model: str | None, tags: Sequence[str]) -> str:
    lines = ["---", "library_name: transformers", "pipeline_tag: text-generation"]
    if base_model:
        lines.append(f"base_model: {json.dumps(base_model)}")
    lines.append("tags:")
    lines += [f"- {t}" for t in tags]
    return "\n".join(lines + ["---", ""])


def card_text(stage: str, kind: str, base_model: str | None, recipe_excerpt: Mapping[str, Any] | None,
              inputs: Sequence[Mapping[str, Any]], eval_markdown: str | None = None) -> str:
    """The README.md text of a checkpoint (see the module docstring)."""
    import yaml

    body = [
        _front_matter(base_model, ["cascade-rl", kind]),
        f"# {stage}",
        "",
        f"Checkpoint of the Cascade stage `{stage}` (kind `{kind}`)"
        + (f", descending from `{base_model}`." if base_model else "."),
        "",
        "## Use",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        'tok = AutoTokenizer.from_pretrained("path/to/this/folder")',
        'model = AutoModelForCausalLM.from_pretrained("path/to/this/folder")',
        'messages = [{"role": "user", "content": "What is 12 plus 30? /no_think"}]  # or " /think"',
        "ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors=\"pt\")",
        "print(tok.decode(model.generate(ids, max_new_tokens=64)[0][ids.shape[1]:], skip_special_tokens=True))",
        "```",
        "",
        "The chat template is ChatML; a user turn ending in ` /think` asks for `<think>…</think>` before the",
        "answer, ` /no_think` pre-fills an empty think block so the answer comes directly.",
        "",
        "## Data versions",
        "",
        "| input | version |",
        "|---|---|",
        *(f"| {i.get('asset')} | `{i.get('data_version')}` |" for i in inputs),
        "",
    ]
    if recipe_excerpt:
        body += ["## Recipe excerpt", "", "```yaml", yaml.safe_dump(dict(recipe_excerpt), sort_keys=False).rstrip(),
                 "```", ""]
    body += [EVAL_START, eval_section(eval_markdown), EVAL_END, ""]
    return "\n".join(body)


def eval_section(eval_markdown: str | None) -> str:
    if not eval_markdown:
        return "## Evaluation\n\nNot evaluated yet."
    return "## Evaluation\n\nHeld-out scores (points, 95% interval):\n\n" + eval_markdown


def write_model_card(folder: str | Path, stage: str, kind: str, base_model: str | None,
                     recipe_excerpt: Mapping[str, Any] | None, inputs: Sequence[Mapping[str, Any]]) -> Path:
    """Write README.md into a checkpoint folder, keeping an eval section already there."""
    path = Path(folder) / CARD_FILE
    old = path.read_text() if path.exists() else ""
    text = card_text(stage, kind, base_model, recipe_excerpt, inputs)
    if EVAL_START in old and EVAL_END in old:
        kept = old[old.index(EVAL_START):old.index(EVAL_END) + len(EVAL_END)]
        text = text[:text.index(EVAL_START)] + kept + text[text.index(EVAL_END) + len(EVAL_END):]
    path.write_text(text)
    return path


def set_eval_table(folder: str | Path, eval_markdown: str) -> Path | None:
    """Replace the eval section of a checkpoint's README.md; None when the folder has no card."""
    path = Path(folder) / CARD_FILE
    if not path.exists():
        return None
    text = path.read_text()
    if EVAL_START not in text or EVAL_END not in text:
        return None
    new = EVAL_START + "\n" + eval_section(eval_markdown) + "\n" + EVAL_END
    # The folder is published: replace the card whole, so a kill mid-write leaves the old one.
    tmp = path.with_name(f".{CARD_FILE}.tmp")
    tmp.write_text(text[:text.index(EVAL_START)] + new + text[text.index(EVAL_END) + len(EVAL_END):])
    tmp.replace(path)
    return path
