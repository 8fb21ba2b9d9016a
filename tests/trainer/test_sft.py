"""SFT: assistant-only targets, packing without cross-row attention, exact grad accumulation."""

from __future__ import annotations

import json

import pytest
import torch

from curation.chat import prompt_messages, render_messages
from trainer.batching import build_batch, target_logprobs
from trainer.config import SFTConfig
from trainer.sft import pack, tokenize_conversation
from trainer.stage import run_stage


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_targets_are_exactly_assistant_contents(tok):
    messages = prompt_messages("Hi there", "no_think") + [
        {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Sum 2 and 3 /think"},
        {"role": "assistant", "content": "<think>2+3=5</think>\\boxed{5}"}]
    ids, mask = tokenize_conversation(tok, messages, 512)
    targets = tok.decode([t for t, m in zip(ids, mask) if m])
    assert targets == "Hello.<|im_end|><think>2+3=5</think>\\boxed{5}<|im_end|>"
    assert tok.decode(ids).startswith("<|im_start|>system\n")
    # The /no_think turn's empty think block is part of the prompt (pre-filled), not a target.
    assert "<|im_start|>assistant\n<think>\n\n</think>\n\nHello." in tok.decode(ids)
    assert tok.decode(ids) == render_messages(messages)
    short_ids, short_mask = tokenize_conversation(tok, messages, 10)
    assert len(short_ids) == len(short_mask) == 10


def test_packing_keeps_rows_apart(tiny_model_dir, tok):
    from transformers import AutoModelForCausalLM

    from trainer.backend_api import Backend

    backend = Backend()
    backend.model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    backend.device = torch.device("cpu")
    segs = [tokenize_conversation(tok, prompt_messages(q, "no_think") + [{"role": "assistant", "content": a}], 192)
            for q, a in [("one", "first answer"), ("two two", "second"), ("three", "3")]]
    bins = pack(segs, 192, enabled=True)  # three short /no_think rows (empty think block included) fit one bin
    assert len(bins) == 1 and sorted(len(s[0]) for s in bins[0]) == sorted(len(s[0]) for s in segs)
    with torch.no_grad():
        packed, _ = target_logprobs(backend, build_batch(bins, tok.pad_token_id))
        alone = torch.cat([target_logprobs(backend, build_batch([[s]], tok.pad_token_id))[0] for s in bins[0]])
        padded, _ = target_logprobs(backend, build_batch([[s] for s in bins[0]], tok.pad_token_id))
    torch.testing.assert_close(packed, alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(padded, alone, atol=1e-5, rtol=1e-5)
    assert len(pack(segs, 128, enabled=False)) == 3


def test_group_batch_matches_each_completion_alone(tiny_model_dir, tok):
    """A prompt computed once for several completions gives each one its own log-probs."""
    from transformers import AutoModelForCausalLM

    from trainer.backend_api import Backend
    from trainer.batching import build_group_batch

    backend = Backend()
    backend.model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    backend.device = torch.device("cpu")
    rows = [([11, 12, 13, 14], [[20, 21, 22], [23], [24, 25, 26, 27, 28]]), ([30, 31], [[40, 41]])]
    with torch.no_grad():
        grouped, entropy = target_logprobs(backend, build_group_batch(rows, tok.pad_token_id), with_entropy=True)
        alone = [target_logprobs(backend, build_batch([[(p + c, [False] * len(p) + [True] * len(c))]],
                                                      tok.pad_token_id), with_entropy=True)
                 for p, cs in rows for c in cs]
    torch.testing.assert_close(grouped, torch.cat([lp for lp, _ in alone]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, torch.cat([e for _, e in alone]), atol=1e-5, rtol=1e-5)
    assert grouped.numel() == sum(len(c) for _, cs in rows for c in cs)


def test_sft_stage_learns_and_writes_hf_folder(sft_kwargs):
    import pyarrow.parquet as pq

    result = run_stage(SFTConfig(**{**sft_kwargs, "max_steps": 8, "tensorboard": True}))
    out = result.output_dir
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "lineage.json"):
        assert (out / name).exists(), name
    assert not (out / "checkpoints").exists() and list((out / "tb").iterdir())
    metrics = pq.read_table(result.metrics_path).to_pylist()
    assert [m["step"] for m in metrics] == list(range(8))
    assert metrics[-1]["loss"] < metrics[0]["loss"] - 0.5
    assert all(m["grad_norm"] > 0 and m["lr"] >= 0 for m in metrics)
    lineage = json.loads(result.lineage_path.read_text())
    assert lineage["algorithm"] == "sft" and lineage["parent"]["path"] == sft_kwargs["policy"]
    assert lineage["dataset"]["data_version"] and lineage["config_hash"] and lineage["libraries"]["torch"]


def test_grad_accumulation_equals_bigger_batch(sft_kwargs, tmp_path):
    from safetensors.torch import load_file

    common = {**sft_kwargs, "max_steps": 2, "packing": False}
    a = run_stage(SFTConfig(**{**common, "output_dir": str(tmp_path / "a"), "batch_size": 4, "grad_accum": 1}))
    b = run_stage(SFTConfig(**{**common, "output_dir": str(tmp_path / "b"), "batch_size": 1, "grad_accum": 4}))
    wa, wb = load_file(a.output_dir / "model.safetensors"), load_file(b.output_dir / "model.safetensors")
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], atol=2e-5, rtol=1e-3)  # Adam amplifies float summation-order noise
