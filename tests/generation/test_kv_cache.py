"""generation.kv_cache's preallocated cache holds exactly what transformers' DynamicCache holds
(appends, rows leaving, a prompt copied to its k rows, growth past the planned size), and the
sampler decodes bit-identical tokens and log-probs with it as with the DynamicCache."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Qwen2Config
from transformers.cache_utils import DynamicCache

from generation.hf_sampler import PrefixSharedSampler
from generation.kv_cache import preallocated_cache
from trainer.models import make_tiny_model

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
QUESTIONS = ("hi", "What is 12 plus 7 and why?", "a much longer prompt, with padding on the left", "ok", "why")
LAYERS, HEADS, DIM = 2, 2, 4


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small_config() -> LlamaConfig:
    return LlamaConfig(num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                       hidden_size=HEADS * DIM, intermediate_size=8, vocab_size=16)


def states(rows: int, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(rows, HEADS, tokens, DIM), torch.randn(rows, HEADS, tokens, DIM)


def assert_same(ours, reference) -> None:
    for layer in range(LAYERS):
        assert ours.get_seq_length(layer) == reference.get_seq_length(layer)
        assert ours.get_mask_sizes(1, layer) == reference.get_mask_sizes(1, layer)
        assert torch.equal(ours.layers[layer].keys, reference.layers[layer].keys)
        assert torch.equal(ours.layers[layer].values, reference.layers[layer].values)


def test_holds_what_a_dynamic_cache_holds_through_appends_repeats_and_row_removal():
    torch.manual_seed(0)
    ours, reference = preallocated_cache(small_config(), rows=6, length=9), DynamicCache()
    steps = [("update", states(2, 4)), ("repeat", 3), ("update", states(6, 1)), ("select", torch.tensor([0, 2, 3, 5])),
             ("update", states(4, 1)), ("select", torch.tensor([1, 3])), ("update", states(2, 1)),
             ("select", torch.tensor([1]))]
    for op, arg in steps:
        for cache in (ours, reference):
            for layer in range(LAYERS):
                if op == "update":
                    returned = cache.update(*arg, layer)
                    assert returned[0] is cache.layers[layer].keys
            if op == "repeat":
                cache.batch_repeat_interleave(arg)
            elif op == "select":
                cache.batch_select_indices(arg)
        assert_same(ours, reference)
    key_buffer = ours.layers[0].key_buffer
    assert key_buffer.shape == (6, HEADS, 9, DIM)  # allocated once, never reallocated
    assert ours.layers[0].keys.data_ptr() == key_buffer.data_ptr()  # a view, not a copy


def test_grows_past_the_planned_length_and_rows():
    torch.manual_seed(1)
    ours, reference = preallocated_cache(small_config(), rows=1, length=2), DynamicCache()
    for key, value in (states(2, 3), states(2, 1), states(2, 1)):
        for cache in (ours, reference):
            for layer in range(LAYERS):
                cache.update(key, value, layer)
    cache_rows = ours.layers[0].key_buffer.shape[0]
    assert cache_rows == 2 and ours.get_seq_length() == 5
    assert_same(ours, reference)


def test_models_with_other_than_full_attention_layers_keep_their_own_cache():
    assert preallocated_cache(small_config(), 2, 8) is not None
    sliding = Qwen2Config(num_hidden_layers=2, use_sliding_window=True, sliding_window=4, max_window_layers=0,
                          hidden_size=8, num_attention_heads=2, num_key_value_heads=2, intermediate_size=8)
    assert preallocated_cache(sliding, 2, 8) is None


def test_rejects_an_unknown_cache_kind(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match="kv_cache must be one of"):
        PrefixSharedSampler(object(), tokenizer, kv_cache="static")


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_sampler_decodes_bit_identically_to_the_dynamic_cache(arch, tiny_model_dir, tmp_path, monkeypatch):
    folder = tiny_model_dir if arch == "qwen2" else make_tiny_model(tmp_path / "llama", seed=1, arch="llama")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    prompts = [tokenizer(CHAT.format(q), add_special_tokens=False)["input_ids"] for q in QUESTIONS]
    # A random 4% of the vocabulary also stops a row, so sampled rows end at different steps and leave the batch.
    extra_stops = torch.randperm(len(tokenizer), generator=torch.Generator().manual_seed(0))[:len(tokenizer) // 25]
    caches = []  # the preallocated caches of the last call, to see rows leave them
    new_cache = PrefixSharedSampler._new_cache
    monkeypatch.setattr(PrefixSharedSampler, "_new_cache",
                        lambda self, *args: caches.append(new_cache(self, *args)) or caches[-1])
    settings = [(1, 0.0, 1.0, "multinomial", 64), (3, 1.0, 1.0, "multinomial", 8), (4, 0.7, 0.9, "inverse_cdf", 64),
                (2, 1.0, 0.95, "multinomial", 4)]
    for samples, temperature, top_p, draw, batch_size in settings:
        results = []
        for kv_cache in ("dynamic", "preallocated"):
            caches.clear()
            sampler = PrefixSharedSampler(model, tokenizer, batch_size=batch_size, draw=draw, kv_cache=kv_cache)
            sampler.stop_ids = sampler.stop_ids + extra_stops.tolist()
            results.append(sampler.sample(prompts, samples, 24, temperature, top_p, seed=7))
        assert results[0] == results[1]  # token ids, log-probs (floats compared exactly) and truncation
        rows_left = [cache.layers[0].key_buffer.shape[0] - cache.layers[0].rows for cache in caches]
        lengths = [len(row.token_ids) for group in results[0] for row in group]
        if temperature > 0:  # rows left the batch while others went on decoding
            assert any(rows_left) and min(lengths) < max(lengths)


def test_prefill_in_row_groups_decodes_what_one_prefill_does(tiny_model_dir, monkeypatch):
    import generation.hf_sampler as sampler_module

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    prompts = [tokenizer(CHAT.format(q), add_special_tokens=False)["input_ids"] for q in QUESTIONS]
    width = max(len(p) for p in prompts)
    forwards = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **k: forwards.append(k["input_ids"].shape) or forward(*a, **k))
    results = {}
    for budget in (10**9, 2 * width):  # one prefill forward; two rows per forward
        monkeypatch.setattr(sampler_module, "PREFILL_TOKENS", budget)
        forwards.clear()
        results[budget] = PrefixSharedSampler(model, tokenizer, batch_size=64).sample(prompts, 2, 12, 0.0)
        prefills = [shape for shape in forwards if shape[1] > 1]
        assert [rows for rows, _ in prefills] == ([len(prompts)] if budget > 10**6 else
                                                  [2] * (len(prompts) // 2) + [1] * (len(prompts) % 2))
    one, grouped = results.values()
    assert [[r.token_ids for r in g] for g in one] == [[r.token_ids for r in g] for g in grouped]
    for a, b in zip((r.logprobs for g in one for r in g), (r.logprobs for g in grouped for r in g)):
        assert a == pytest.approx(b, abs=1e-5)


def test_prompts_sharing_a_prefix_prefill_it_once_and_decode_as_alone(tiny_model_dir, monkeypatch):
    import generation.hf_sampler as sampler_module

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    long = "tell me, in some detail and with examples, how a cache of keys and values speeds decoding up " * 2
    texts = [CHAT.format(long + tag) for tag in (" /think", " /no_think")] + [CHAT.format(q) for q in QUESTIONS]
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert sorted(sampler_module.prefix_families(prompts)[-1]) == [0, 1]  # one family, the longest
    forwards = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **k: forwards.append(k["input_ids"].shape) or forward(*a, **k))
    results = {}
    for shared in (True, False):
        monkeypatch.setattr(sampler_module, "MIN_SHARED_PREFIX", 32 if shared else 10**9)
        forwards.clear()
        results[shared] = PrefixSharedSampler(model, tokenizer, batch_size=64).sample(prompts, 2, 10, 0.0)
        prefills = [shape for shape in forwards if shape[1] > 1]
        # shared: the prefixes (one row per family), then every prompt's own tail; else one prefill of all
        assert [rows for rows, _ in prefills] == ([len(prompts) - 1, len(prompts)] if shared else [len(prompts)])
    ours, alone = results[True], results[False]
    assert [[r.token_ids for r in g] for g in ours] == [[r.token_ids for r in g] for g in alone]
    for a, b in zip((r.logprobs for g in ours for r in g), (r.logprobs for g in alone for r in g)):
        assert a == pytest.approx(b, abs=1e-4)
