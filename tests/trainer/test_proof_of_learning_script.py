"""The proof-of-learning script's data: disjoint sets and SFT targets that end in the verified answer."""

from pathlib import Path

from rewards.math import MathReward
from tests.script_module import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "proof_of_learning.py"


def test_sets_are_disjoint_and_sft_targets_score_correct():
    script = load_script(SCRIPT)
    sets = script.disjoint_sets({"sft": 40, "rl": 60, "eval": 50}, seed=3)
    prompts = {name: {p["prompt"] for p in rows} for name, rows in sets.items()}
    assert [len(prompts[n]) for n in ("sft", "rl", "eval")] == [40, 60, 50]
    assert not prompts["sft"] & prompts["rl"] and not prompts["sft"] & prompts["eval"]
    assert not prompts["rl"] & prompts["eval"]
    sft = sets["sft"]
    scores = MathReward().score([p["prompt"] for p in sft], [p["response"] for p in sft],
                                answer=[p["answer"] for p in sft])
    assert all(r.score == 1.0 for r in scores)
    table = script.sft_table(sft)
    assert table.num_rows == 40 and set(table.column("mode").to_pylist()) == {"no_think"}


def test_score_problems_splits_format_from_arithmetic():
    script = load_script(SCRIPT)
    problems = [{"prompt": "What is 12 plus 30?", "answer": "42", "op": "+"},
                {"prompt": "What is 50 minus 8?", "answer": "42", "op": "-"}]
    completions = [["12 + 30 = 42. The answer is \\boxed{42}.", "12 + 30 = 42."],
                   ["50 - 8 = 41. The answer is \\boxed{41}.", "50 - 8 = 42. The answer is \\boxed{42}."]]
    out = script.score_problems(problems, completions)
    assert out["score"] == 0.5 and out["n"] == 2
    assert out["by_op"] == {"+": 0.5, "-": 0.5}
    assert out["boxed"] == 0.75 and out["correct_when_boxed"] == 2 / 3
    assert out["reasons"]["no_boxed_answer"] == 1


def test_measure_runs_on_the_hf_engine_and_samples_as_grpo_rollouts(tiny_model_dir, monkeypatch):
    """`measure` goes through generation's hf engine: greedy is argmax decoding, and the sampled
    completions are the ones the GRPO torch backend's sampler (HFRolloutEngine) draws for that seed."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.evaluate import render_prompts
    from trainer.rollout import HFRolloutEngine

    script = load_script(SCRIPT)
    monkeypatch.setattr(script, "score_problems", lambda problems, completions: completions)
    problems = script.arithmetic_problems(3, seed=1)
    out = script.measure(Path(tiny_model_dir), problems, max_new_tokens=6, samples=2, temperature=1.0)

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    texts = render_prompts([p["prompt"] for p in problems], script.MODE)
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    rollout = HFRolloutEngine(model, tokenizer, batch_size=64)
    sampled = [[r.text for r in g] for g in rollout.generate(ids, 2, 6, temperature=1.0, seed=0)]
    near_greedy = [[g[0].text] for g in rollout.generate(ids, 1, 6, temperature=1e-6, seed=0)]
    assert out["sampled"] == sampled and all(len(g) == 2 for g in sampled)
    assert out["greedy"] == near_greedy and len(near_greedy) == 3
