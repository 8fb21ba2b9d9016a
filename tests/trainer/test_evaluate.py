"""evaluate_checkpoint on the tiny model with fake rewards: shape, determinism, alignment, stats."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pyarrow as pa
import pytest

from rewards.base import Reward, RewardResult
from trainer.evaluate import EvalSet, evaluate_checkpoint, render_prompts, results_table, score_completions

PROMPTS = ["What is 3 plus 4?", "Add 10 and 20, then subtract 5 from the result please.", "Hi", "What is 7 minus 2?"]


def _table(answers: list[str | None]) -> pa.Table:
    n = len(answers)
    return pa.table({"row_id": [f"r{i}" for i in range(n)], "prompt": PROMPTS[:n], "answer": answers})


class RecordingReward(Reward):
    """Scores 1 when the row's answer is "1", None when it is missing; records what it saw."""

    name, version = "recording", "1"

    def __init__(self) -> None:
        self.calls: list[tuple[list, list[str], dict]] = []

    def _score_batch(self, prompts, completions, columns):
        self.calls.append((list(prompts), list(completions), columns))
        out = []
        for answer in columns["answer"]:
            if answer is None:
                out.append(RewardResult(None, "not_applicable"))
            else:
                out.append(RewardResult(float(answer == "1"), "correct" if answer == "1" else "wrong_answer"))
        return out


def test_render_prompts_uses_mode_suffix_and_default_system():
    think, no_think = render_prompts(["2+2?"], "think")[0], render_prompts(["2+2?"], "no_think")[0]
    assert "You are a helpful and harmless assistant." in think
    assert "2+2? /think<|im_end|>" in think and "2+2? /no_think<|im_end|>" in no_think
    assert think.endswith("<|im_start|>assistant\n")
    assert no_think.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # /no_think: empty block pre-filled


def test_render_prompts_puts_a_rows_tools_in_the_system_turn_like_training():
    from curation.chat import render_prompt

    tools = json.dumps([{"type": "function", "function": {"name": "set_timer", "parameters": {"type": "object"}}}])
    with_tools, plain = render_prompts(["Set a timer.", "2+2?"], "no_think", [tools, None])
    assert "set_timer" in with_tools and with_tools == render_prompt("Set a timer.", "no_think", tools=tools)
    assert "set_timer" not in plain and plain == render_prompts(["2+2?"], "no_think")[0]


def test_score_completions_mean_stderr_and_none_excluded():
    reward = RecordingReward()
    result = score_completions(EvalSet(_table(["1", "0", None, "1"]), reward), ["a", "b", "c", "d"], reward_cache="off")
    scores = [1.0, 0.0, 1.0]
    mean = sum(scores) / 3
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / 3)
    assert result["n"] == 3
    assert result["score"] == pytest.approx(mean)
    assert result["stderr"] == pytest.approx(std / math.sqrt(3))
    assert result["reasons"] == {"correct": 2, "wrong_answer": 1, "not_applicable": 1}
    # Per-row raw scores keyed by row id (None = not applicable) and the Wilson interval of 2/3.
    assert result["rows"] == {"r0": 1.0, "r1": 0.0, "r2": None, "r3": 1.0}
    assert result["interval"] == "wilson" and result["lo"] < mean < result["hi"]
    prompts, completions, columns = reward.calls[0]
    assert prompts == PROMPTS and completions == ["a", "b", "c", "d"] and columns["answer"] == ["1", "0", None, "1"]


@pytest.fixture(scope="module")
def lively_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with larger random weights, so greedy outputs depend on the prompt."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0.0, 0.5)
    out = tmp_path_factory.mktemp("lively")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


def test_evaluate_checkpoint_tiny_model(lively_model_dir):
    tiny_model_dir = lively_model_dir
    math_reward, other_reward = RecordingReward(), RecordingReward()
    sets = {
        "math": EvalSet(_table(["1", "0", "1", "0"]), math_reward),
        "ifeval": EvalSet(_table(["1", "1", "0"]), other_reward, modes=("no_think",)),
    }
    kwargs = dict(max_new_tokens=8, seed=0, reward_cache="off")  # the rewards must see every call
    batched = evaluate_checkpoint(tiny_model_dir, sets, batch_size=3, **kwargs)
    assert set(batched) == {"math", "ifeval"}
    assert set(batched["math"]) == {"think", "no_think"} and set(batched["ifeval"]) == {"no_think"}
    assert batched["math"]["think"]["score"] == pytest.approx(0.5) and batched["math"]["think"]["n"] == 4
    assert batched["ifeval"]["no_think"]["score"] == pytest.approx(2 / 3)
    # The reward got one completion per row, aligned with its prompt and answer columns.
    prompts, completions, columns = math_reward.calls[0]
    assert prompts == PROMPTS and columns["answer"] == ["1", "0", "1", "0"] and len(completions) == 4
    think_completions = completions
    assert len(set(think_completions)) > 1  # prompt-dependent outputs, so alignment is checked
    no_think_completions = math_reward.calls[1][1]
    assert think_completions != no_think_completions  # the mode suffix reaches the model

    # Greedy decoding: unbatched, in another order of calls, the completions are the same.
    again = RecordingReward()
    evaluate_checkpoint(tiny_model_dir, {"math": EvalSet(_table(["1", "0", "1", "0"]), again)},
                        modes=("think",), batch_size=1, **kwargs)
    assert again.calls[0][1] == think_completions
    assert "math" in results_table(batched) and "no_think" in results_table(batched)


def test_evaluate_checkpoint_rejects_unknown_mode(tiny_model_dir):
    with pytest.raises(ValueError, match="mode"):
        evaluate_checkpoint(tiny_model_dir, {}, modes=("fast",))


def test_a_set_with_its_own_budget_is_decoded_at_it_and_the_others_at_the_default(monkeypatch):
    """One engine call per budget: the SWE-like set gets its 64 tokens (greedy and its TTS plan),
    the others the call's 8, and every completion still lands on its own row."""
    import generation.engine as engine_module

    calls: list[tuple[int, list[str]]] = []

    class BudgetEchoEngine:
        def generate(self, requests, sampling):
            calls.append((sampling.max_new_tokens, [r.text for r in requests]))
            return [[SimpleNamespace(text=f"{sampling.max_new_tokens}|{r.text}")] for r in requests]

        def close(self):
            pass

    class SeenBudget:
        def run(self, gen, prompts, texts, columns, reward, max_new_tokens, seed, ids):
            return {"budget": max_new_tokens}

    monkeypatch.setattr(engine_module, "build_engine", lambda *a, **k: BudgetEchoEngine())
    short, long_ = RecordingReward(), RecordingReward()
    sets = {"math": EvalSet(_table(["1", "0"]), short),
            "swe": EvalSet(_table(["1", "0", "1"]), long_, max_new_tokens=64, tts=SeenBudget())}
    out = evaluate_checkpoint("unused", sets, modes=("no_think",), max_new_tokens=8, reward_cache="off")
    assert sorted(budget for budget, _ in calls) == [8, 64] and [len(p) for _, p in sorted(calls)] == [2, 3]
    assert all(c.startswith("8|") for c in short.calls[0][1])
    swe_completions = long_.calls[0][1]
    assert [c.split("|")[0] for c in swe_completions] == ["64"] * 3
    assert [c.split("|", 1)[1] for c in swe_completions] == dict(calls)[64]  # row order kept
    assert out["swe"]["no_think"]["tts"] == {"budget": 64} and "tts" not in out["math"]["no_think"]
