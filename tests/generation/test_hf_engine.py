"""The `hf` engine honours the Engine contract (tiny random model): k samples per request in
order, finish reasons, log-probs, greedy determinism, seeds, the token-id path, long prompts."""

from __future__ import annotations

import pytest
import torch

from generation.engine import Engine, PromptTooLong, Request, Sampling, build_engine
from generation.hf import HFEngine

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
QUESTIONS = ("hi", "What is 12 plus 7 and why?", "a much longer prompt, with padding on the left", "ok")


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    built = build_engine("hf", str(tiny_model_dir), dtype="float32", batch_size=8, device="cpu")
    yield built
    built.close()


def requests() -> list[Request]:
    return [Request(text=CHAT.format(q)) for q in QUESTIONS]


def test_builds_by_name_and_names_its_versions(engine):
    import transformers

    assert isinstance(engine, Engine) and isinstance(engine, HFEngine) and engine.name == "hf"
    assert engine.version == f"hf-transformers{transformers.__version__}-torch{torch.__version__}"
    with pytest.raises(ValueError, match="unknown dtype"):
        HFEngine("unused", dtype="float7")


def test_k_samples_per_request_in_order_with_logprobs(engine):
    out = engine.generate(requests(), Sampling(max_new_tokens=8, temperature=1.0, seed=3, logprobs=True), samples=3)
    assert [len(group) for group in out] == [3] * len(QUESTIONS)
    for i, group in enumerate(out):
        assert [s.sample_index for s in group] == [0, 1, 2] and all(s.request_index == i for s in group)
        for s in group:
            assert 0 < len(s.token_ids) <= 8 and len(s.logprobs) == len(s.token_ids)
            assert all(lp <= 0 for lp in s.logprobs)
            assert s.text == engine.tokenizer.decode(s.token_ids, skip_special_tokens=True)
    plain = engine.generate(requests()[:1], Sampling(max_new_tokens=4, seed=3))
    assert plain[0][0].logprobs is None


def test_finish_reasons_stop_and_length(engine):
    sampling = Sampling(max_new_tokens=6, temperature=0)
    greedy = engine.generate(requests(), sampling)
    assert all(s.finish_reason == "length" and len(s.token_ids) == 6 for g in greedy for s in g)
    # The random model seldom ends its turn: make a later greedy token (new in its row) a stop token.
    stops = engine.sampler.stop_ids
    i, end = next((i, j) for i, g in enumerate(greedy) for j in range(1, 6) if g[0].token_ids[j] not in
                  g[0].token_ids[:j])
    row = greedy[i][0].token_ids
    engine.sampler.stop_ids = stops + [row[end]]
    try:
        first = engine.generate(requests()[i:i + 1], sampling)[0][0]
    finally:
        engine.sampler.stop_ids = stops
    assert first.finish_reason == "stop" and first.token_ids == row[:end + 1]


def test_greedy_is_deterministic_and_matches_transformers_generate(engine):
    sampling = Sampling(max_new_tokens=10, temperature=0, logprobs=True)
    a = engine.generate(requests(), sampling, samples=2)
    b = engine.generate(requests(), Sampling(max_new_tokens=10, temperature=0, seed=99, logprobs=True), samples=2)
    assert [[s.token_ids for s in g] for g in a] == [[s.token_ids for s in g] for g in b]
    assert all(g[0].token_ids == g[1].token_ids for g in a)
    tok, model = engine.tokenizer, engine.model
    for question, group in zip(QUESTIONS, a):
        ids = torch.tensor([tok(CHAT.format(question), add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False,
                                 eos_token_id=engine.sampler.stop_ids, pad_token_id=engine.sampler.pad_id)
            logits = model(torch.cat([ids, torch.tensor([group[0].token_ids])], 1)).logits[0, ids.shape[1] - 1:-1]
        assert group[0].token_ids == ref[0, ids.shape[1]:].tolist()
        expected = logits.log_softmax(-1).gather(-1, torch.tensor(group[0].token_ids)[:, None]).squeeze(-1)
        torch.testing.assert_close(torch.tensor(group[0].logprobs), expected, atol=1e-4, rtol=1e-4)


def test_seed_reproduces_and_varies(engine):
    def draw(seed):
        out = engine.generate(requests(), Sampling(max_new_tokens=8, temperature=1.0, seed=seed), samples=2)
        return [[s.token_ids for s in g] for g in out]

    torch.manual_seed(123)
    before = torch.rand(1)
    first = draw(7)
    assert draw(7) == first and draw(8) != first
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1), before)  # the global RNG stream was left alone


def test_token_ids_path_matches_text_path(engine):
    tok = engine.tokenizer
    texts = requests()
    with_ids = [Request(text="ignored when ids are given", token_ids=tuple(tok(r.text, add_special_tokens=False)
                                                                              ["input_ids"])) for r in texts]
    sampling = Sampling(max_new_tokens=6, temperature=0.8, seed=1)
    assert ([[s.token_ids for s in g] for g in engine.generate(texts, sampling, 2)]
            == [[s.token_ids for s in g] for g in engine.generate(with_ids, sampling, 2)])


def test_prompt_too_long_names_every_offender_before_sampling(engine):
    limit = engine.model.config.max_position_embeddings - 16
    ok = Request(text=CHAT.format("hi"))
    long_ = Request(text="x", token_ids=(5,) * (limit + 1))
    edge = Request(text="x", token_ids=(5,) * limit)  # exactly fits
    with pytest.raises(PromptTooLong) as info:
        engine.generate([ok, long_, edge, long_], Sampling(max_new_tokens=16))
    assert info.value.indexes == (1, 3) and info.value.limit == limit
    assert "longer than" in str(info.value)


def test_from_loaded_shares_the_model(engine):
    shared = HFEngine.from_loaded(engine.model, engine.tokenizer, batch_size=2)
    assert shared.model is engine.model
    sampling = Sampling(max_new_tokens=5, temperature=0)
    assert ([g[0].token_ids for g in shared.generate(requests(), sampling)]
            == [g[0].token_ids for g in engine.generate(requests(), sampling)])
    assert engine.generate([], sampling) == []
    with pytest.raises(ValueError, match="samples"):
        engine.generate(requests(), sampling, samples=0)
