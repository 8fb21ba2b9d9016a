"""Padding-free packing: segment boundaries instead of an L x L mask, with the exact loss of
unpacked training (the reference is a plain sdpa model, untouched by trainer.attention)."""

from __future__ import annotations

import random

import pytest
import torch

from trainer.attention import (
    NAME,
    PackedSegments,
    segments_from_positions,
    use_varlen_attention,
)
from trainer.backend_api import Backend
from trainer.batching import build_batch, build_group_batch, target_logprobs


def _load(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def _backend(model) -> Backend:
    backend = Backend()
    backend.model, backend.device = model, torch.device("cpu")
    return backend


def _segments(seed: int, vocab: int, lengths: list[int]) -> list[tuple[list[int], list[bool]]]:
    rng = random.Random(seed)
    out = []
    for n in lengths:
        prompt = rng.randint(1, n - 1)
        out.append(([rng.randrange(3, vocab) for _ in range(n)], [False] * prompt + [True] * (n - prompt)))
    return out


def _alone_loss(model, rows) -> tuple[torch.Tensor, int]:
    """Sum of target log-probs of every sequence run alone through a plain model, and the count."""
    total, count = torch.zeros(()), 0
    for row in rows:
        for ids, mask in row:
            logp = model(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(-1)
            wanted = torch.tensor(mask[1:])
            total = total + logp[:-1][wanted].gather(1, torch.tensor(ids[1:])[wanted][:, None]).sum()
            count += int(wanted.sum())
    return total, count


def test_batch_is_flat_with_boundaries_and_no_square_mask():
    rows = [[([5, 6, 7], [False, True, True]), ([8, 9], [True, True])], [([10, 11, 12, 13], [False, False, True, True])]]
    batch = build_batch(rows, pad_id=0)
    assert "attention_mask" not in batch and batch["input_ids"].shape == (1, 9)
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3]]
    assert batch["segments"].tolist() == [[0, 3, 0, 0], [3, 5, 3, 3], [5, 9, 5, 5]]
    # a segment's first token is never a target, even when its mask says so
    assert batch["pred_targets"].tolist() == [6, 7, 9, 12, 13]
    assert batch["select"].nonzero()[:, 1].tolist() == [0, 1, 3, 6, 7]
    group = build_group_batch([([1, 2], [[3, 4], [], [5]]), ([6], [[7]])], pad_id=0)
    assert group["segments"].tolist() == [[0, 2, 0, 0], [2, 4, 0, 2], [4, 5, 0, 2], [5, 6, 5, 5], [6, 7, 5, 6]]
    assert group["position_ids"].tolist() == [[0, 1, 2, 3, 2, 0, 1]]
    assert group["pred_targets"].tolist() == [3, 4, 5, 7] and group["pred_slot"].tolist() == [0, 1, 0, 2]


def test_packed_loss_and_grads_equal_unpacked_training(tiny_model_dir):
    """Loss and gradients of one packed micro-batch == the same rows trained one by one."""
    packed_model, plain = _load(tiny_model_dir).train(), _load(tiny_model_dir).train()
    vocab = packed_model.config.vocab_size
    rows = [_segments(0, vocab, [37, 80, 5]), _segments(1, vocab, [120]), _segments(2, vocab, [2, 64, 33])]
    batch = build_batch(rows, pad_id=0)
    logp, _ = target_logprobs(_backend(packed_model), batch)
    n = logp.numel()
    loss = -logp.sum() / n
    loss.backward()
    total, count = _alone_loss(plain, rows)
    reference = -total / count
    reference.backward()
    assert count == n and packed_model.config._attn_implementation == NAME
    assert plain.config._attn_implementation == "sdpa"
    assert abs(float(loss.detach()) - float(reference.detach())) < 1e-5
    for (name, p), q in zip(packed_model.named_parameters(), plain.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_group_batch_matches_a_plain_model(tiny_model_dir):
    """Prefix-shared completions get the log-probs of prompt + completion through a plain model."""
    model, plain = _load(tiny_model_dir).eval(), _load(tiny_model_dir).eval()
    rows = [([11, 12, 13, 14, 15], [[20, 21, 22], [23], [24, 25, 26, 27, 28]]), ([30, 31], [[40, 41], [42]])]
    with torch.no_grad():
        grouped, _ = target_logprobs(_backend(model), build_group_batch(rows))
        expected = []
        for prompt, completions in rows:
            for c in completions:
                logp = plain(input_ids=torch.tensor([prompt + c])).logits[0].log_softmax(-1)
                expected.append(logp[len(prompt) - 1:-1].gather(1, torch.tensor(c)[:, None])[:, 0])
    torch.testing.assert_close(grouped, torch.cat(expected), atol=1e-5, rtol=1e-5)


def test_no_square_tensor_is_materialised(tiny_model_dir):
    """No op of the packed forward+backward produces anything near L x L elements."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        numel = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    Largest.numel = max(Largest.numel, t.numel())
            return out

    model = _load(tiny_model_dir).train()
    rows = [[s] for s in _segments(3, model.config.vocab_size, [256] * 8)]  # L = 2048
    batch = build_batch(rows)
    with Largest():
        logp, _ = target_logprobs(_backend(model), batch)
        logp.sum().backward()
    L = batch["input_ids"].shape[1]
    assert L == 2048 and Largest.numel < L * L // 2, Largest.numel


def test_varlen_model_behaves_as_sdpa_without_segments(tiny_model_dir, tmp_path):
    """Padded 2D masks, packed position_ids alone and generate() match a plain sdpa model; a saved
    model does not carry the implementation into its config (vLLM, evaluation load it plainly)."""
    model, plain = _load(tiny_model_dir).eval(), _load(tiny_model_dir).eval()
    use_varlen_attention(model)
    model.save_pretrained(tmp_path)
    assert NAME not in (tmp_path / "config.json").read_text()
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).logits[mask.bool()],
                                   plain(input_ids=ids, attention_mask=mask).logits[mask.bool()])
        pos = torch.tensor([[0, 1, 2, 0, 1, 2]])
        packed = model(input_ids=ids[1:], position_ids=pos).logits[0]
        alone = torch.cat([plain(input_ids=ids[1:, :3]).logits[0], plain(input_ids=ids[1:, 3:]).logits[0]])
        torch.testing.assert_close(packed, alone, atol=1e-5, rtol=1e-5)
        a = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
        b = plain.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(a, b)
    assert [s.spans for s in segments_from_positions(pos)] == [((0, 3, 0, 0), (3, 6, 3, 3))]


def test_sliding_window_models_are_refused():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, use_sliding_window=True, sliding_window=8, max_window_layers=0)
    with pytest.raises(NotImplementedError, match="sliding-window"):
        use_varlen_attention(Qwen2ForCausalLM(config))


@pytest.mark.slow
def test_smollm2_packed_loss_equals_unpacked():
    """The real Llama-architecture base model: packed loss == rows alone (fp32)."""
    from trainer.models import ensure_base_model

    try:
        path = ensure_base_model()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    model, plain = _load(path).eval(), _load(path).eval()
    rows = [_segments(4, model.config.vocab_size, [300, 45]), _segments(5, model.config.vocab_size, [160])]
    with torch.no_grad():
        logp, _ = target_logprobs(_backend(model), build_batch(rows))
        total, count = _alone_loss(plain, rows)
    assert count == logp.numel()
    assert abs(float(-logp.sum() / count) - float(-total / count)) < 1e-5


@pytest.mark.gpu
def test_flash_varlen_matches_per_segment_sdpa():
    """CUDA + flash-attn: the varlen kernel gives the per-segment SDPA result (SFT and GRPO layouts)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("flash_attn")
    from trainer.attention import _flash, _flash_varlen, _per_segment

    torch.manual_seed(0)
    q = torch.randn(1, 8, 700, 64, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn(2, 1, 2, 700, 64, device="cuda", dtype=torch.bfloat16)
    for spans in [((0, 300, 0, 0), (300, 700, 300, 300)), ((0, 200, 0, 0), (200, 450, 0, 200), (450, 700, 0, 200))]:
        seg = PackedSegments(spans, torch.device("cuda"))
        got = _flash(q, k, v, seg, 0.0, None, _flash_varlen())
        want = _per_segment(q.float(), k.float(), v.float(), seg, 0.0, None)
        torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_flash_path_in_a_bf16_training_forward(tiny_model_dir, monkeypatch):
    """Under CUDA bf16 autocast the packed forward takes flash-attn and agrees with SDPA per segment."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("flash_attn")
    from trainer import attention

    model = _load(tiny_model_dir).cuda().eval()
    backend = _backend(model)
    backend.device, backend.autocast_dtype = torch.device("cuda"), torch.bfloat16
    rows = [_segments(0, model.config.vocab_size, [300, 45, 120]), _segments(1, model.config.vocab_size, [200])]
    calls = []
    real = attention._flash
    monkeypatch.setattr(attention, "_flash", lambda *a: calls.append(1) or real(*a))
    with torch.no_grad():
        flash, _ = target_logprobs(backend, build_batch(rows))
        group, _ = target_logprobs(backend, build_group_batch([([5, 6, 7], [[8, 9], [10, 11, 12]])]))
        monkeypatch.setattr(attention, "_flash_varlen", lambda: None)
        sdpa, _ = target_logprobs(backend, build_batch(rows))
        group_sdpa, _ = target_logprobs(backend, build_group_batch([([5, 6, 7], [[8, 9], [10, 11, 12]])]))
    assert calls
    torch.testing.assert_close(flash, sdpa, atol=5e-2, rtol=5e-2)
    torch.testing.assert_close(group, group_sdpa, atol=5e-2, rtol=5e-2)
