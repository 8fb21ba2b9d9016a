"""HF rollout engine (G per prompt, stop tokens, seeded, log-probs) and `cascade train` CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.trainer.conftest import LENGTH
from trainer.rollout import HFRolloutEngine, RolloutEngine


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    return HFRolloutEngine(AutoModelForCausalLM.from_pretrained(tiny_model_dir), tok, batch_size=5)


def test_rollouts_grouped_seeded_and_stopped(engine):
    tok = engine.tokenizer
    prompts = [tok("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")["input_ids"],
               tok("<|im_start|>user\nWhat is 12 plus 7 and why?<|im_end|>\n<|im_start|>assistant\n")["input_ids"]]
    out = engine.generate(prompts, 3, 10, 1.0, seed=5)
    assert isinstance(engine, RolloutEngine)
    assert [len(g) for g in out] == [3, 3] and all(r.prompt_index == i for i, g in enumerate(out) for r in g)
    for r in (r for g in out for r in g):
        assert 0 < len(r.token_ids) <= 10
        assert r.truncated == (r.token_ids[-1] not in engine.stop_ids)
        assert all(t not in engine.stop_ids for t in r.token_ids[:-1])
    again = engine.generate(prompts, 3, 10, 1.0, seed=5)
    assert [r.token_ids for g in again for r in g] == [r.token_ids for g in out for r in g]


def test_logprobs_match_a_plain_forward(engine):
    tok = engine.tokenizer
    prompts = [tok("<|im_start|>user\nshort<|im_end|>\n")["input_ids"],
               tok("<|im_start|>user\na much longer prompt, with padding on the left<|im_end|>\n")["input_ids"]]
    out = engine.generate(prompts, 2, 6, 1.0, seed=1, return_logprobs=True)
    for i, group in enumerate(out):
        for r in group:
            ids = torch.tensor([prompts[i] + r.token_ids])
            with torch.no_grad():
                logp = engine.model(ids).logits[0, len(prompts[i]) - 1:-1].log_softmax(-1)
            expected = logp.gather(-1, torch.tensor(r.token_ids)[:, None]).squeeze(-1)
            torch.testing.assert_close(torch.tensor(r.logprobs), expected, atol=1e-4, rtol=1e-4)


def test_greedy_rows_do_not_depend_on_their_batch(engine):
    """Padding, the shared prompt cache and dropping finished rows leave each row's tokens alone."""
    from trainer.evaluate import GREEDY_TEMPERATURE

    tok = engine.tokenizer
    wide = HFRolloutEngine(engine.model, tok, batch_size=12)  # all 4 prompts x 3 in one batch
    prompts = [tok(f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
               for q in ("hi", "What is 12 plus 7 and why?", "a much longer prompt, with padding on the left", "ok")]
    # The random model rarely ends a turn and repeats itself: stopping also on the tokens that
    # greedy rows switch to makes rows end at different steps, so finished ones leave the batch.
    greedy = [g[0].token_ids for g in wide.generate(prompts, 1, 16, GREEDY_TEMPERATURE, seed=0)]
    wide.stop_ids = wide.stop_ids + sorted({t for ids in greedy for t in ids} - {ids[0] for ids in greedy})
    together = wide.generate(prompts, 3, 16, GREEDY_TEMPERATURE, seed=0)
    for i, prompt in enumerate(prompts):
        alone = wide.generate([prompt], 1, 16, GREEDY_TEMPERATURE, seed=0)[0][0]
        assert all(r.token_ids == alone.token_ids for r in together[i])
    assert len({len(g[0].token_ids) for g in together}) > 1


def test_top_p_keeps_only_the_nucleus():
    from generation.hf_sampler import sample_next

    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3]])).repeat(200, 1)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        token, logp = sample_next(logits, 1.0, top_p=0.5)
    assert set(token[0::2].tolist()) == {0} and set(token[1::2].tolist()) == {1}
    torch.testing.assert_close(logp, torch.zeros_like(logp))  # the nucleus holds one token: p = 1
    with torch.random.fork_rng():
        torch.manual_seed(0)
        token, logp = sample_next(logits, 1.0, top_p=0.75)
    assert set(token[0::2].tolist()) == {0, 1} and set(token[1::2].tolist()) == {1, 2}


ROOT = Path(__file__).resolve().parents[2]
ENV = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}  # the fake rewards live in tests/


def _cascade() -> list[str]:
    exe = Path(sys.executable).with_name("cascade")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "dagster_project.cli"]


def test_cascade_train_cli(tiny_model_dir, rl_parquet, tmp_path, cascade_home):
    out = tmp_path / "out"
    cfg = tmp_path / "grpo.yaml"
    cfg.write_text(yaml.safe_dump({
        "policy": str(tiny_model_dir), "dataset": str(rl_parquet), "rewards": [LENGTH], "output_dir": str(out),
        "max_steps": 1, "save_steps": 1, "seed": 0, "backend": "torch", "num_generations": 2,
        "prompts_per_step": 2, "max_new_tokens": 6, "learning_rate": 1e-4, "temperature": 0.9,
        "torch_threads": 1}))
    done = subprocess.run([*_cascade(), "train", "grpo", "--config", str(cfg)], capture_output=True, text=True,
                          timeout=300, env=ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["output_dir"] == str(out)
    assert (out / "model.safetensors").exists() and (out / "lineage.json").exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: p\ndataset: d\noutput_dir: o\nrewards: [math]\nnum_generations: one\n")
    failed = subprocess.run([*_cascade(), "train", "grpo", "--config", str(bad)], capture_output=True, text=True,
                            timeout=120, env=ENV)
    assert failed.returncode == 2 and "num_generations" in failed.stderr
