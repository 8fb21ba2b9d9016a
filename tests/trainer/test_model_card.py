"""Model cards (trainer.model_card) and checkpoints that load with plain transformers."""

from __future__ import annotations

import shutil

import pytest
import yaml

from trainer.model_card import CARD_FILE, card_text, set_eval_table, write_model_card

INPUTS = [{"asset": "sft_stage2", "data_version": "abc123", "path": "/x"},
          {"asset": "math_rl_prompts", "data_version": "def456", "path": "/y"}]


def _front_matter(text: str) -> dict:
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def test_card_has_hf_front_matter_and_sections():
    text = card_text("math_rl", "math", "sft_stage2", {"learning_rate": 1e-5, "max_steps": 6}, INPUTS)
    meta = _front_matter(text)
    assert meta["library_name"] == "transformers" and meta["base_model"] == "sft_stage2"
    assert meta["pipeline_tag"] == "text-generation" and {"cascade-rl", "math"} <= set(meta["tags"])
    assert "| math_rl_prompts | `def456` |" in text and "learning_rate: 1.0e-05" in text
    assert "apply_chat_template" in text and "Not evaluated yet." in text


def test_eval_section_is_replaced_and_survives_a_rewrite(tmp_path):
    write_model_card(tmp_path, "math_rl", "math", "sft_stage2", {}, INPUTS)
    assert set_eval_table(tmp_path, "| domain | score |\n|---|---:|\n| math | 41.0 |") is not None
    text = (tmp_path / CARD_FILE).read_text()
    assert "| math | 41.0 |" in text and "Not evaluated yet." not in text
    write_model_card(tmp_path, "math_rl", "math", "sft_stage2", {"seed": 3}, INPUTS)  # e.g. a re-materialization
    text = (tmp_path / CARD_FILE).read_text()
    assert "| math | 41.0 |" in text and "seed: 3" in text
    assert set_eval_table(tmp_path / "nowhere", "x") is None


def test_checkpoint_loads_and_chats_with_plain_transformers(tiny_model_dir, tmp_path):
    """Only AutoModelForCausalLM + AutoTokenizer.apply_chat_template: the template pre-fills the
    empty think block in /no_think mode and renders exactly as the platform's prompts."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from curation.chat import NO_THINK_PREFILL, render_prompt

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, folder)
    write_model_card(folder, "tiny", "base_model", None, {}, [])
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    for mode in ("think", "no_think"):
        messages = [{"role": "system", "content": "You are a helpful and harmless assistant."},
                    {"role": "user", "content": f"What is 2 plus 2? /{mode}"}]
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert text == render_prompt("What is 2 plus 2?", mode)
        assert text.endswith(NO_THINK_PREFILL) == (mode == "no_think")
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]
