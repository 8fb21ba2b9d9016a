"""generation.hf_sampler's token draw: right frequencies, the same nucleus as a full sort, greedy at 0."""

from __future__ import annotations

import torch

from generation.hf_sampler import _draw, _nucleus, sample_next


def full_sort_nucleus(scaled: torch.Tensor, top_p: float) -> torch.Tensor:
    """The reference: sort the whole row, drop tokens whose higher-ranked mass reaches top_p."""
    values, order = scaled.sort(dim=-1, descending=True)
    probs = values.softmax(-1)
    values = values.masked_fill((probs.cumsum(-1) - probs) >= top_p, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(-1, order, values)


def test_draw_follows_the_probabilities_and_never_draws_zeros():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 0.0, 1.0]]).repeat(20000, 1)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        tokens = _draw(probs)
    freq = torch.bincount(tokens[0::2], minlength=4).float() / 20000
    torch.testing.assert_close(freq, torch.tensor([0.1, 0.0, 0.6, 0.3]), atol=0.01, rtol=0)
    assert set(tokens[1::2].tolist()) == {3}


def test_nucleus_matches_a_full_sort_on_peaked_and_flat_rows():
    torch.manual_seed(0)
    peaked = torch.randn(8, 5000) * 8   # nucleus within the first top-k
    flat = torch.randn(8, 5000) * 0.5   # nucleus of thousands: widened to the whole row
    for logits in (peaked, flat):
        for top_p in (0.5, 0.9, 0.95):
            ours, ref = _nucleus(logits, top_p), full_sort_nucleus(logits, top_p)
            differ = (ours.isinf() != ref.isinf()).sum(-1)
            assert int(differ.max()) <= 1  # at most a float tie at the boundary
            kept = ~ref.isinf() & ~ours.isinf()
            assert torch.equal(ours[kept], ref[kept])


def test_sample_next_greedy_at_zero_and_logprobs_of_the_processed_distribution():
    logits = torch.tensor([[1.0, 3.0, 2.0], [0.5, 0.1, 0.2]])
    token, logp = sample_next(logits, 0.0, top_p=0.1)
    assert token.tolist() == [1, 0]
    torch.testing.assert_close(logp, logits.log_softmax(-1).gather(-1, token[:, None]).squeeze(-1))
    for draw in ("multinomial", "inverse_cdf"):
        with torch.random.fork_rng():
            torch.manual_seed(1)
            token, logp = sample_next(logits.repeat(100, 1), 0.5, draw=draw)
        expected = (logits.repeat(100, 1) / 0.5).log_softmax(-1).gather(-1, token[:, None]).squeeze(-1)
        torch.testing.assert_close(logp, expected)
        assert len(set(token.tolist())) == 3
