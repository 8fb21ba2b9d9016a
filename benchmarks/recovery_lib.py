"""Helpers of benchmarks/bench_recovery.py: domains, prompt rows, per-row scoring, statistics.

What: the candidate domains (built-in sample rows + a registry reward each), the train/held-out
rows of a victim/degrade pair, greedy per-row scoring of a checkpoint, a probe (greedy pass rate
and sampled-group reward variance per domain, to pick a pair that can show forgetting), and the
summaries the benchmark prints: trainer.stats intervals per cell and paired tests (rows aligned
by row_id) between checkpoints.

Why a module of its own: the benchmark script stays short, and the pure pieces (row building,
summaries) are unit-tested without a model (tests/benchmarks/test_bench_recovery.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Domain:
    """A domain the benchmark can use as victim or degrade domain."""

    rl: str
    """Sample generator of its training prompts (curation.samples)."""
    eval: str | None
    """Sample generator of its held-out prompts; None: other rows of `rl` under another seed."""
    reward: str
    """Registry reward scoring it (rewards.registry)."""


DOMAINS: dict[str, Domain] = {
    "mcqa": Domain("mcqa_rl", None, "mcqa"),
    "structured_output": Domain("structured_output_rl", None, "structured_output"),
    "tool_call": Domain("tool_call_rl", None, "tool_call"),
    "math": Domain("math_rl", "math_eval", "math"),
    "ifeval": Domain("instruction_rl", "instruction_eval", "ifeval"),
}
"""Domain name (the rows' `domain` column and the MOPD teacher key) -> its data and reward."""

COLUMNS = ("answer", "json_schema", "tools", "reference_call", "instruction_id_list", "kwargs", "domain")
"""Row columns handed to the rewards (each reads the ones it needs)."""


def _dicts(gen: str, seed: int) -> list[dict]:
    from curation.samples import records

    return [r for r in records(gen, seed=seed) if isinstance(r, dict)]


def domain_rows(domain: str, n_train: int, n_eval: int) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows) of `domain` as RL_SCHEMA dicts; no prompt text is shared."""
    spec = DOMAINS[domain]
    rows = _dicts(spec.rl, 1234)[:n_train]
    seen = {r["prompt"] for r in rows}
    pool = _dicts(spec.eval, 1234) if spec.eval else _dicts(spec.rl, 4321)
    extra = [r for r in pool if r["prompt"] not in seen]
    base = {"source": spec.rl, "domain": domain, "mode": "no_think"}
    train = [{**base, "row_id": f"{domain}-{i}", **r} for i, r in enumerate(rows)]
    held = [{**base, "source": spec.eval or spec.rl, "row_id": f"eval-{domain}-{i}", **r}
            for i, r in enumerate(extra[:n_eval])]
    return train, held


def rl_row(row: dict) -> dict:
    """The row restricted to RL_SCHEMA's columns (generators may add others)."""
    from curation.schemas import RL_SCHEMA

    return {name: row.get(name) for name in RL_SCHEMA.names}


def write_prompts(rows: list[dict], path: Path) -> Path:
    """Write RL prompt rows as the trainers' parquet prompt set."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from curation.schemas import RL_SCHEMA

    pq.write_table(pa.Table.from_pylist([rl_row(r) for r in rows], schema=RL_SCHEMA), path)
    return path


def reference_response(row: dict) -> str:
    """A correct response for an SFT degrade step on `row` (the verifier's reference answer)."""
    domain = row["domain"]
    if domain == "mcqa":
        return str(row["answer"])
    if domain == "math":
        return f"\\boxed{{{row['answer']}}}"
    if domain == "tool_call":
        return "<tool_call>\n" + json.dumps(json.loads(row["reference_call"])) + "\n</tool_call>"
    if domain == "structured_output":
        return json.dumps(_structured_answer(row["prompt"]))
    raise ValueError(f"no reference response for domain {domain!r}")


def _structured_answer(prompt: str) -> dict[str, Any]:
    """The JSON object a structured_output prompt asks for, parsed back from its text."""
    import re

    m = re.match(r"(\w+) is (\d+) years old, lives in (\w+) and (is|is not) a club member", prompt)
    if not m:
        raise ValueError(f"unrecognised structured_output prompt: {prompt[:60]!r}")
    return {"name": m.group(1), "age": int(m.group(2)), "city": m.group(3), "member": m.group(4) == "is"}


@cache
def reward(name: str) -> Any:
    """The registry reward `name`, built once (math's checker pool starts once per process)."""
    from rewards.registry import get_reward

    return get_reward(name)


def score_texts(rows: list[dict], texts: list[str]) -> list[float]:
    """Per-row scores (None as 0) of completions `texts` under each row's domain reward."""
    out: list[float] = [0.0] * len(rows)
    for domain in {r["domain"] for r in rows}:
        idx = [i for i, r in enumerate(rows) if r["domain"] == domain]
        cols = {k: [rows[i].get(k) for i in idx] for k in COLUMNS}
        scores = reward(DOMAINS[domain].reward)([rows[i]["prompt"] for i in idx], [texts[i] for i in idx], **cols)
        for i, s in zip(idx, scores):
            out[i] = float(s or 0.0)
    return out


def generate(model_dir: Path | str, rows: list[dict], samples: int, max_new_tokens: int, temperature: float,
             seed: int = 0) -> list[list[str]]:
    """`samples` completions per row (no_think, the default system prompt), decoded."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from curation.chat import render_prompt
    from generation.hf_sampler import PrefixSharedSampler
    from spec.train import DEFAULT_SYSTEM

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sampler = PrefixSharedSampler(model, tok, batch_size=16)
    ids = [tok(render_prompt(r["prompt"], "no_think", DEFAULT_SYSTEM, r.get("tools")),
               add_special_tokens=False)["input_ids"] for r in rows]
    groups = sampler.sample(ids, samples, max_new_tokens, temperature=temperature, seed=seed)
    return [[tok.decode(c.token_ids, skip_special_tokens=True) for c in g] for g in groups]


def score_checkpoint(model_dir: Path | str, held: dict[str, list[dict]], max_new_tokens: int) -> dict[str, dict]:
    """Greedy per-row scores of each domain's held-out rows: {domain: {row_id: score}}."""
    rows = [r for domain_rows_ in held.values() for r in domain_rows_]
    texts = [g[0] for g in generate(model_dir, rows, 1, max_new_tokens, temperature=0.0)]
    scores = score_texts(rows, texts)
    out: dict[str, dict] = {d: {} for d in held}
    for r, s in zip(rows, scores):
        out[r["domain"]][r["row_id"]] = s
    return out


def cell_of(scores: dict[str, float]) -> dict[str, Any]:
    """Mean and 95% interval of one domain's per-row scores (Wilson for pass rates, else bootstrap)."""
    from trainer.stats import cell

    values = [scores[k] for k in sorted(scores)]
    c = cell(values)
    return {"rate": c.score, "ci95": [c.lo, c.hi], "n": c.n, "pass": int(sum(v >= 1.0 for v in values)),
            "method": c.method}


def paired(old: dict[str, float], new: dict[str, float]) -> dict[str, Any]:
    """Paired comparison new − old on rows aligned by row_id (McNemar mid-p / paired bootstrap)."""
    from trainer.stats import align, compare

    a, b = align(old, new)
    return compare(a, b).as_dict()


def probe(model_dir: Path | str, domains: list[str], n: int, groups: int, samples: int,
          max_new_tokens: int) -> dict[str, dict]:
    """Per domain: greedy pass rate on `n` held-out rows, and on `groups` training prompts with
    `samples` completions at temperature 1, the share of groups with reward variance (GRPO's signal)."""
    out = {}
    for domain in domains:
        train, held = domain_rows(domain, groups, n)
        greedy = score_texts(held, [g[0] for g in generate(model_dir, held, 1, max_new_tokens, 0.0)])
        sampled = generate(model_dir, train, samples, max_new_tokens, 1.0, seed=1)
        varied, mean = 0, 0.0
        for row, texts in zip(train, sampled):
            s = score_texts([row] * len(texts), texts)
            varied += len(set(s)) > 1
            mean += sum(s) / len(s) / len(train)
        out[domain] = {"greedy": cell_of({str(i): v for i, v in enumerate(greedy)}),
                       "sampled_mean_reward": mean, "groups_with_variance": f"{varied}/{len(train)}"}
    return out
