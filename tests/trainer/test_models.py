"""The tiny test model and the chat template every stage relies on."""

from __future__ import annotations

import json

import pytest

from curation.chat import CHAT_TEMPLATE
from spec.train import DEFAULT_SYSTEM
from trainer.models import TAG_TOKENS, make_tiny_model


def _reference_render(messages, add_generation_prompt=False):
    from curation.chat import render_messages

    return render_messages(messages, add_generation_prompt=add_generation_prompt)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


CONVERSATIONS = [
    [{"role": "system", "content": DEFAULT_SYSTEM}, {"role": "user", "content": "What is 2 + 3? /think"}],
    [
        {"role": "system", "content": DEFAULT_SYSTEM},
        {"role": "user", "content": "Hi /no_think"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Sum 4 and 5. /think"},
        {"role": "assistant", "content": "<think>4+5=9</think>\\boxed{9}"},
    ],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("gen", [False, True])
def test_chat_template_matches_curation_rendering(tokenizer, messages, gen):
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
    assert rendered == _reference_render(messages, add_generation_prompt=gen)
    assert tokenizer.chat_template == CHAT_TEMPLATE


def test_tags_survive_decoding_and_are_single_tokens(tokenizer):
    text = "<think>7 + 5 = 12</think>The answer is \\boxed{12}<tool_call>{}</tool_call>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    for tag in TAG_TOKENS:
        assert tokenizer.convert_tokens_to_ids(tag) in ids
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.decode(ids + [end], skip_special_tokens=True) == text
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token_id != end


def test_tiny_model_is_small_deterministic_and_complete(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    files = {p.name for p in tiny_model_dir.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json"} <= files
    weights = load_file(tiny_model_dir / "model.safetensors")
    n = sum(t.numel() for t in weights.values())
    assert 300_000 < n < 3_000_000
    again = load_file(make_tiny_model(tmp_path / "again", seed=0) / "model.safetensors")
    assert all((weights[k] == again[k]).all() for k in weights)
    gen = json.loads((tiny_model_dir / "generation_config.json").read_text())
    assert gen["pad_token_id"] is not None and gen["eos_token_id"]


def test_tiny_llama_variant_generates(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = make_tiny_model(tmp_path / "llama", seed=1, arch="llama")
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    ids = tok("hello", return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 3 or tok.eos_token_id in out[0].tolist()
    with pytest.raises(ValueError):
        make_tiny_model(tmp_path / "bad", arch="gpt9")
    assert torch.isfinite(model(ids).logits).all()
