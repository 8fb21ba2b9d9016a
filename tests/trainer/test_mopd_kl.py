"""MOPD moves a student toward its teacher: tiny random models, real stages, a fixed prompt set.

The recovery Cascade 2 uses MOPD for, in miniature. The teacher is the tiny random model taught by
SFT to answer its domain's questions ("What is a plus b?", every sum 7) with "7"; the student is
that teacher after more SFT on the answer "3", as a later stage degrades a domain. After a few
MOPD steps (trainer.mopd through trainer.stage.run_stage, the teacher serving the rows' domain):

- the reverse KL(student ‖ teacher) on the fixed prompt set falls to under a third of what it
  was. It is measured exactly per position and summed along the student's own samples (by the
  chain rule, E_{y~student} Σ_t KL(student(·|y<t) ‖ teacher(·|y<t)) is the sequence-level
  reverse KL) with a fixed sampling seed, so an unchanged student measures the same twice;
- the student's held-out eval on the teacher's domain (trainer.evaluate, greedy, on prompts
  worded unlike the training ones; the scorer: the completion holds the answer) closes at least
  half of its gap to the teacher's score, and the `learned` gate (trainer.gates) calls the
  gain significant; and the trainer's logged per-step reverse KL falls from its first to its
  last step.

The same run at a learning rate of 1e-12 (0 is not a valid setting), a no-op trainer, must fail
the KL, eval and gate checks: their margins are ones that doing nothing cannot pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.chat import prompt_messages
from curation.schemas import RL_SCHEMA, SFT_SCHEMA
from tests.trainer.fake_rewards import DigitReward
from trainer.config import SFTConfig
from trainer.gates import domain_cell, learned_gate
from trainer.mopd import MOPDConfig
from trainer.stage import run_stage

DOMAIN, ANSWER, WRONG = "math", "7", "3"
PROMPTS = [f"What is {a} plus {7 - a}?" for a in range(8)]  # the fixed prompt set: trained and measured
HELD_OUT = [f"Add {a} and {7 - a}." for a in range(8)]  # the domain's eval rows, worded otherwise
KL_FALL = 1 / 3  # the reverse KL after must be below this fraction of the one before
GAP_CLOSED = 0.5  # the eval must close at least this share of the student's gap to the teacher


def _rows(prompts: list[str]) -> list[dict]:
    return [{"row_id": str(i), "source": "t", "domain": DOMAIN, "mode": "no_think", "prompt": p, "answer": ANSWER}
            for i, p in enumerate(prompts)]


def _sft(policy: Path, root: Path, name: str, answer: str, steps: int) -> Path:
    rows = [{k: r[k] for k in SFT_SCHEMA.names if k in r} | {"text": "", "messages": json.dumps(
        prompt_messages(r["prompt"], "no_think") + [{"role": "assistant", "content": answer}])} for r in _rows(PROMPTS)]
    pq.write_table(pa.Table.from_pylist(rows, schema=SFT_SCHEMA), root / f"{name}.parquet")
    return run_stage(SFTConfig(policy=str(policy), dataset=str(root / f"{name}.parquet"), output_dir=str(root / name),
                               max_steps=steps, batch_size=4, learning_rate=3e-3, max_length=96, seed=3,
                               tensorboard=False, dtype="fp32")).output_dir


@pytest.fixture(scope="module")
def setting(tiny_model_dir, tmp_path_factory, cascade_home) -> Iterator[dict]:
    """The teacher, the degraded student, the fixed prompt set, and their evals."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as conftest's `_one_thread`, which a module fixture runs before
    root = tmp_path_factory.mktemp("mopd_kl")
    teacher = _sft(tiny_model_dir, root, "teacher", ANSWER, steps=30)
    student = _sft(teacher, root, "student", WRONG, steps=16)
    pq.write_table(pa.Table.from_pylist(_rows(PROMPTS), schema=RL_SCHEMA), root / "prompts.parquet")
    yield {"root": root, "teacher": teacher, "student": student, "prompts": root / "prompts.parquet",
           "student_eval": _evaluate(student), "teacher_eval": _evaluate(teacher)}
    torch.set_num_threads(threads)


def _evaluate(checkpoint: Path) -> dict:
    from trainer.evaluate import EvalSet, evaluate_checkpoint

    table = pa.Table.from_pylist(_rows(HELD_OUT), schema=RL_SCHEMA)
    return evaluate_checkpoint(checkpoint, {DOMAIN: EvalSet(table, DigitReward())}, modes=("no_think",),
                               max_new_tokens=12, reward_cache="off")


def reverse_kl(student_dir: Path, teacher_dir: Path, config: MOPDConfig, samples: int = 4, tokens: int = 8) -> float:
    """Mean over the fixed prompts of the sequence-level KL(student ‖ teacher) at temperature 1,
    as Σ_t of the exact per-position KL along `samples` seeded student samples of up to `tokens`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.prompt_set import load_prompt_set

    tokenizer = AutoTokenizer.from_pretrained(student_dir)
    student, teacher = (AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
                        for d in (student_dir, teacher_dir))
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    generator, total = torch.Generator().manual_seed(0), 0.0
    prompt_ids = load_prompt_set(config, tokenizer).token_ids  # exactly what the trainer feeds
    with torch.no_grad():
        for ids in prompt_ids:
            seqs, alive = torch.tensor([ids] * samples), torch.ones(samples)
            for _ in range(tokens):
                if not alive.any():  # every sample ended: no position left to measure
                    break
                log_s = torch.log_softmax(student(seqs).logits[:, -1], -1)
                log_t = torch.log_softmax(teacher(seqs).logits[:, -1], -1)
                total += float(((log_s.exp() * (log_s - log_t)).sum(-1) * alive).sum())
                nxt = torch.multinomial(log_s.exp(), 1, generator=generator)
                alive = alive * (nxt[:, 0] != stop)
                seqs = torch.cat([seqs, nxt], 1)
    return total / (len(prompt_ids) * samples)


@pytest.mark.parametrize("learning_rate, learns", [(3e-3, True), (1e-12, False)], ids=["trained", "no-op"])
def test_mopd_moves_the_student_toward_its_teacher(setting, learning_rate, learns) -> None:
    config = MOPDConfig(policy=str(setting["student"]), dataset=str(setting["prompts"]),
                        output_dir=str(setting["root"] / f"mopd_{learning_rate:g}"),
                        teachers={DOMAIN: str(setting["teacher"])}, keep_teachers_loaded=True,
                        max_steps=8, prompts_per_step=8, num_generations=8, max_new_tokens=8,
                        learning_rate=learning_rate, seed=3, tensorboard=False, dtype="fp32")
    result = run_stage(config)
    trained = result.output_dir
    before, after = (reverse_kl(d, setting["teacher"], config) for d in (setting["student"], trained))
    score = {name: domain_cell(setting[f"{name}_eval"], DOMAIN)["score"] for name in ("student", "teacher")}
    assert score["teacher"] - score["student"] >= 50, score  # the student forgot: a gap to close
    trained_eval = _evaluate(trained)
    gap_after = score["teacher"] - domain_cell(trained_eval, DOMAIN)["score"]
    kl_fell = after < KL_FALL * before
    gap_closed = gap_after <= (1 - GAP_CLOSED) * (score["teacher"] - score["student"])
    gate = learned_gate(setting["student_eval"], trained_eval, DOMAIN)
    assert (kl_fell, gap_closed, gate["passed"]) == (learns, learns, learns), (before, after, score, gap_after, gate)
    if learns:  # the trainer's own per-step estimate (sampled on-policy, logged per teacher) falls with it
        curve = [r[f"reverse_kl/{DOMAIN}"] for r in pq.read_table(result.metrics_path).to_pylist()]
        assert len(curve) == 8 and curve[-1] < KL_FALL * curve[0], curve
