"""Bradley–Terry RM: training on the tiny model, HF format, pooling under padding, RMReward."""

from __future__ import annotations

import json
import random

import pytest

from rewards.reward_model import RMConfig, RMReward, RewardModelScorer, mixes_languages, render, score_pairs, train_reward_model


def _pairs(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        rows.append({"prompt": f"What is {a} plus {b}?",
                     "chosen": f"<think>{a} + {b} = {a + b}</think>The answer is \\boxed{{{a + b}}}.",
                     "rejected": "minus minus minus less less"})
    return rows


@pytest.fixture(scope="module")
def rm_dir(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("rm") / "rm"
    return train_reward_model(tiny_model_dir, _pairs(32, seed=1), out,
                              RMConfig(learning_rate=2e-3, epochs=2, batch_size=8, max_length=128))


def test_training_saves_hf_sequence_classifier(rm_dir, tiny_model_dir):
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    config = AutoConfig.from_pretrained(rm_dir)
    assert config.num_labels == 1 and config.architectures[0].endswith("ForSequenceClassification")
    assert config.pad_token_id == AutoTokenizer.from_pretrained(rm_dir).pad_token_id is not None
    assert AutoModelForSequenceClassification.from_pretrained(rm_dir).num_labels == 1
    log = json.loads((rm_dir / "rm_training.json").read_text())
    assert log["steps"] == 8 and log["losses"][-1] < log["losses"][0]
    # it learned the preference on pairs it never saw; the untrained head has no idea
    assert score_pairs(RewardModelScorer(rm_dir), _pairs(16, seed=2)) >= 0.9


def test_preference_table_from_jsonl_and_empty_table(tiny_model_dir, tmp_path):
    path = tmp_path / "prefs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _pairs(4, seed=3)))
    out = train_reward_model(tiny_model_dir, path, tmp_path / "rm", RMConfig(max_steps=1, max_length=64))
    assert json.loads((out / "rm_training.json").read_text())["steps"] == 1
    with pytest.raises(ValueError):
        train_reward_model(tiny_model_dir, [], tmp_path / "none")


@pytest.mark.parametrize("pad_is_eos", [False, True])
@pytest.mark.parametrize("side", ["left", "right"])
def test_pooling_ignores_padding(rm_dir, side, pad_is_eos):
    """A row scores the same alone and padded in a batch, for either side and pad == EOS."""
    scorer = RewardModelScorer(rm_dir, padding_side=side)
    if pad_is_eos:
        scorer.tokenizer.pad_token = scorer.tokenizer.eos_token
    assert (scorer.tokenizer.pad_token_id == scorer.tokenizer.eos_token_id) == pad_is_eos
    prompts = ["What is 1 plus 2?", "Write a long explanation of the sum of many numbers please"]
    responses = ["3", "The sum is " + " plus ".join(str(i) for i in range(30)) + " which equals 435."]
    alone = [scorer([p], [r])[0] for p, r in zip(prompts, responses)]
    batched = scorer(prompts, responses)
    assert batched == pytest.approx(alone, abs=1e-4)
    # the texts end with the EOS token (<|im_end|>) followed by "\n": an EOS inside the text
    # must not be taken for padding
    assert scorer.tokenizer.eos_token in render(prompts[0], responses[0])


def test_scores_come_back_in_input_order_from_length_sorted_batches(rm_dir):
    """Texts are batched by length (shortest first), so batches of 2 mix rows from all over the
    input: each score must still land on its own row and equal the row's score alone."""
    scorer = RewardModelScorer(rm_dir, batch_size=2)
    lengths = [9, 1, 25, 4, 16, 1, 30]
    prompts = [f"Question {i}?" for i in range(len(lengths))]
    responses = [" ".join(["plus"] * n) + f" {i}" for i, n in enumerate(lengths)]
    alone = [scorer([p], [r])[0] for p, r in zip(prompts, responses)]
    assert len(set(round(a, 4) for a in alone)) > 3  # the rows score differently, so a mix-up shows
    assert scorer(prompts, responses) == pytest.approx(alone, abs=1e-4)


def test_render_scores_the_final_text_only():
    assert render("q", "<think>secret</think>answer") == render("q", "answer")
    assert "secret" not in render("q", "<think>secret</think>answer")


def test_rm_reward_language_penalty(rm_dir):
    reward = RMReward(model_path=str(rm_dir))
    completions = ["The answer is \\boxed{5}.", "The answer is 五 \\boxed{5}, 答案是五.", "<think>思考</think>The answer is 5."]
    results = reward.score(["What is 2 plus 3?"] * 3, completions)
    plain = RMReward(model_path=str(rm_dir), language_penalty=False).score(["What is 2 plus 3?"] * 3, completions)
    assert [r.reason for r in results] == ["scored", "language_mixing", "scored"]
    assert results[1].score == pytest.approx(min(r.score for r in plain) - 10.0)
    assert results[0].score == pytest.approx(plain[0].score)
    assert reward.batch_dependent and reward.version != RMReward(model_path=str(rm_dir), language_penalty=False).version


def test_rm_reward_version_follows_weights(rm_dir, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(rm_dir, copy)
    assert RMReward(model_path=copy).version == RMReward(model_path=rm_dir).version
    (copy / "config.json").write_text((copy / "config.json").read_text() + "\n")
    assert RMReward(model_path=copy).version != RMReward(model_path=rm_dir).version
    with pytest.raises(ValueError):
        RMReward()


def test_script_mixing_detection():
    assert mixes_languages("Привет, how are you today?")
    assert not mixes_languages("Python 很好用，我每天都用它来写各种各样的程序和脚本工具")  # one English word among ~27 characters
    assert not mixes_languages("日本語のテキストと漢字")  # kana + kanji are one script group
    assert not mixes_languages("")
