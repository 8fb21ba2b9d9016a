"""The one token sampler for Hugging Face causal LMs: prefix-shared decoding with the KV cache.

What: `PrefixSharedSampler` draws k completions for each prompt token list from a loaded
transformers model; `sample_next` draws one token per row (temperature, top-p, greedy at 0);
`stop_token_ids` lists the end-of-turn ids; `seeded` runs a block under its own torch seed.

Why one module: the `hf` generation engine (generation.hf), the GRPO rollouts and the evals
(trainer.rollout adapts this class) all sample the same way, so a fix or a speed-up lands
everywhere. Why not `model.generate`: we need only temperature, top-p, stop tokens and the
sampled log-probs, and two things `generate` does not do: each distinct prompt is prefilled
once and its cache copied to its k rows (with k = 8 and 50-token prompts the repeated prefill
was half the sampling time on a CPU), and finished rows leave the batch with their cache, so
the decode cost follows the rows still sampling. Per step on 64 rows x SmolLM2's 49k vocabulary
(2 CPU cores), a full sort for top-p took ~270 ms and torch.multinomial ~80 ms; so top-p looks
at each row's top 64 tokens first (~16 ms) and tokens can be drawn by inverse CDF (~5 ms, DRAWS).
The KV cache is allocated once per chunk and written in place (generation.kv_cache; KV_CACHES):
transformers' DynamicCache concatenates every layer's cache at every step. Long prompts are
prefilled a few rows at a time (PREFILL_TOKENS), which keeps each forward's activations in cache.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, NamedTuple, Sequence


class Completion(NamedTuple):
    """One sampled row: token ids (ending with the stop token unless truncated) and log-probs."""

    token_ids: list[int]
    logprobs: list[float]
    truncated: bool


def stop_token_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """End-of-turn ids: <|im_end|>, the tokenizer eos and the generation config's eos ids."""
    ids: list[int] = []
    candidates = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id]
    gen_eos = getattr(generation_config, "eos_token_id", None)
    candidates += gen_eos if isinstance(gen_eos, list) else [gen_eos]
    for tid in candidates:
        if isinstance(tid, int) and tid >= 0 and tid != tokenizer.unk_token_id and tid not in ids:
            ids.append(tid)
    return ids


@contextlib.contextmanager
def seeded(seed: int | None, device: Any = None) -> Iterator[None]:
    """Run a block under its own torch RNG seed, leaving the global RNG stream untouched."""
    import torch

    if seed is None:
        yield
        return
    devices = [device] if device is not None and getattr(device, "type", "cpu") == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


GREEDY_BELOW = 1e-5
"""Temperatures below this decode greedily (vLLM's own threshold, so both engines agree)."""


def sample_next(logits: Any, temperature: float, top_p: float = 1.0, draw: str = "multinomial") -> tuple[Any, Any]:
    """One token per row from `logits / temperature`, restricted to the top-p nucleus.

    Returns the tokens and their log-probs under that processed distribution (what the
    sampler drew from: after temperature, renormalised over the nucleus when top_p < 1, as
    vLLM's `processed_logprobs`). Temperature 0 (below GREEDY_BELOW) is greedy decoding: the
    argmax, with its log-prob under the unscaled distribution (top-p does not apply), as vLLM
    reports it. `draw`: see DRAWS.
    """
    if temperature < GREEDY_BELOW:
        token = logits.argmax(-1)
        return token, logits.log_softmax(-1).gather(-1, token[:, None]).squeeze(-1)
    scaled = logits / temperature
    if top_p < 1.0:
        scaled = _nucleus(scaled, top_p)
    logp = scaled.log_softmax(-1)
    probs = logp.exp()
    if draw == "multinomial":
        import torch

        token = torch.multinomial(probs, 1).squeeze(-1)
    elif draw == "inverse_cdf":
        token = _draw(probs)
    else:
        raise ValueError(f"draw must be one of {DRAWS}, got {draw!r}")
    return token, logp.gather(-1, token[:, None]).squeeze(-1)


DRAWS = ("multinomial", "inverse_cdf")
"""How a token is drawn from its probabilities (the same distribution, different random streams):
`multinomial` is torch.multinomial, which spends one exponential draw per vocabulary entry (the
trainer keeps it so seeded GRPO runs sample what they sampled before); `inverse_cdf` spends one
uniform per row and was ~17x faster on SmolLM2's 49k vocabulary on CPU, where multinomial was a
third of the decoding time (the `hf` generation engine uses it)."""


def _draw(probs: Any) -> Any:
    """One index per row, index i with probability probs[row, i]: inverse CDF, one uniform per row."""
    import torch

    cdf = probs.double().cumsum(-1)
    u = torch.rand((probs.shape[0], 1), dtype=cdf.dtype, device=probs.device) * cdf[:, -1:]
    # First i with cdf[i] > u: zero-probability tokens (flat steps of the CDF) are never drawn.
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=probs.shape[-1] - 1)


def _nucleus(scaled: Any, top_p: float, first_k: int = 64) -> Any:
    """`scaled` with -inf outside each row's top-p nucleus: a token is dropped when the tokens
    ranked above it already hold top_p of the mass. Looks at the top `first_k` tokens and widens
    only while some row's top tokens hold less than top_p (sorting a whole 49k row per step
    took ~15x longer than a top-64)."""
    import torch

    vocab = scaled.shape[-1]
    k = min(first_k, vocab)
    log_total = scaled.logsumexp(-1, keepdim=True)
    while True:
        top, idx = scaled.topk(k, dim=-1)  # sorted, largest first
        # The whole row: softmax of the sorted logits (exactly the full-sort nucleus).
        probs = top.softmax(-1) if k == vocab else (top - log_total).exp()
        above = probs.cumsum(-1) - probs
        if k == vocab or bool(((above[:, -1] + probs[:, -1]) >= top_p).all()):
            break
        k = min(k * 8, vocab)
    kept = top.masked_fill(above >= top_p, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(-1, idx, kept)


PREFILL_TOKENS = 4096
"""Most prompt tokens (rows x padded width) per prefill forward into a preallocated cache (measured on
2 CPU cores, SmolLM2: 4-7k tokens per forward prefilled fastest, for 50- and 450-token prompts alike)."""

KV_CACHES = ("preallocated", "dynamic")
"""The decode's KV cache: `preallocated` (generation.kv_cache: buffers sized once for prompt +
max_new_tokens, written in place; the default) or `dynamic` (transformers' DynamicCache, which
concatenates per layer per step). Both give bit-identical tokens and log-probs (the attention
sees the same numbers); `dynamic` stays for comparison (benchmarks) and for models whose layers
are not all full attention, which use it whatever is asked."""


MIN_SHARED_PREFIX = 32
"""Prompts form a prefix family when they share at least this many leading tokens..."""
MAX_TAIL = 32
"""...and no member has more than this many tokens after the shared part (a row's /think and
/no_think renderings differ in their last 7-18 tokens; two questions under one instruction differ
in a whole question, which gains little and would make the tails' forward a second prefill)."""


def prefix_families(prompts: Sequence[Sequence[int]]) -> list[list[int]]:
    """Prompt indexes in families that share all but a short tail (MIN_SHARED_PREFIX, MAX_TAIL),
    ordered by their longest prompt; most prompts are a family of one."""
    order = sorted(range(len(prompts)), key=lambda i: list(prompts[i]))
    families: list[list[int]] = []
    shared = longest = 0
    for prev, i in zip([None, *order], order):
        n = 0 if prev is None else min(shared, _common(prompts[prev], prompts[i]))
        if prev is not None and n >= MIN_SHARED_PREFIX and max(longest, len(prompts[i])) - n <= MAX_TAIL:
            families[-1].append(i)
            shared, longest = n, max(longest, len(prompts[i]))
        else:
            families.append([i])
            shared, longest = len(prompts[i]), len(prompts[i])
    return sorted(families, key=lambda f: (max(len(prompts[i]) for i in f), f[0]))


def shared_prefix(family: Sequence[Sequence[int]]) -> int:
    """Tokens every prompt of `family` starts with, leaving each at least one token of its own."""
    return min(min(_common(family[0], p) for p in family), min(len(p) for p in family) - 1)


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _chunks(families: list[list[int]], rows: int) -> Iterator[list[list[int]]]:
    """Consecutive families, as many as fit `rows` prompts per chunk (at least one)."""
    chunk: list[list[int]] = []
    for family in families:
        if chunk and sum(map(len, chunk)) + len(family) > rows:
            yield chunk
            chunk = []
        chunk.append(family)
    if chunk:
        yield chunk


def _left_padded(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    """Token ids and attention mask, left-padded so every row's next token is at the same column."""
    import torch

    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        if p:
            input_ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
            mask[i, width - len(p):] = 1
    return input_ids, mask


class PrefixSharedSampler:
    """k completions per prompt from a transformers causal LM, sharing each prompt's prefill."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 64, synced: bool = False,
                 draw: str = "multinomial", kv_cache: str = "preallocated"):
        """`batch_size`: max rows (prompt x sample) per forward. `synced`: ranks of one ZeRO-3
        group gather parameters inside every forward, so they keep stepping together until
        every rank's rows have ended. `draw`: how tokens are drawn (DRAWS). `kv_cache`: KV_CACHES."""
        if draw not in DRAWS:
            raise ValueError(f"draw must be one of {DRAWS}, got {draw!r}")
        if kv_cache not in KV_CACHES:
            raise ValueError(f"kv_cache must be one of {KV_CACHES}, got {kv_cache!r}")
        self.draw = draw
        self.kv_cache = kv_cache
        self.model = model
        self.synced = synced
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.stop_ids = stop_token_ids(tokenizer, getattr(model, "generation_config", None))
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.stop_ids[0]

    def sample(self, prompts: Sequence[Sequence[int]], samples: int, max_new_tokens: int, temperature: float,
               top_p: float = 1.0, seed: int | None = None) -> list[list[Completion]]:
        """`samples` completions per prompt: result[i] holds prompt i's, in sample order."""
        import torch

        model = self.model
        device = next(model.parameters()).device
        # Prompts that share a long prefix (a row's /think and /no_think renderings) share a chunk and
        # its prefill; families of similar length share a chunk to limit padding; a chunk holds whole groups.
        per_chunk = max(1, self.batch_size // samples)
        families = [f[k:k + per_chunk] for f in prefix_families(prompts) for k in range(0, len(f), per_chunk)]
        grouped: list[list[Completion]] = [[] for _ in prompts]
        was_training = model.training
        model.eval()
        try:
            with seeded(seed, device), torch.no_grad():  # not inference_mode: ZeRO-3 reuses gathered params
                for chunk_families in _chunks(families, per_chunk):
                    chunk = [i for f in chunk_families for i in f]
                    rows = self._sample_chunk([[list(prompts[i]) for i in f] for f in chunk_families], samples,
                                              max_new_tokens, temperature, top_p, device)
                    for k, row in enumerate(rows):
                        grouped[chunk[k // samples]].append(row)
        finally:
            model.train(was_training)
        return grouped

    def _sample_chunk(self, families: list[list[list[int]]], G: int, max_new_tokens: int, temperature: float,
                      top_p: float, device: Any) -> list[Completion]:
        """G rows per prompt, in prompt-major order; `families`: the chunk's prompts, by prefix family."""
        import torch

        prompts = [p for f in families for p in f]
        width = max(len(p) for p in prompts)
        cache = self._new_cache(len(prompts) * G, width + max_new_tokens)
        if cache is not None and any(len(f) > 1 for f in families):
            logits, cache, mask, positions = self._prefill_families(families, cache, device)
        else:
            input_ids, mask = _left_padded(prompts, self.pad_id)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            logits, cache = self._prefill(input_ids.to(device), mask.to(device), positions.to(device), cache)
        if G > 1:
            cache.batch_repeat_interleave(G)
        logits = logits.float().repeat_interleave(G, 0)
        mask = mask.repeat_interleave(G, 0).to(device)
        position = positions[:, -1:].repeat_interleave(G, 0).to(device) + 1
        stops = torch.tensor(self.stop_ids, device=device)
        n_rows = logits.shape[0]
        tokens = torch.full((n_rows, max_new_tokens), self.pad_id, dtype=torch.long, device=device)
        logps = torch.zeros((n_rows, max_new_tokens), device=device)
        active = torch.arange(n_rows, device=device)  # which output row each batch row fills
        ended = torch.zeros(n_rows, dtype=torch.bool, device=device)
        steps = 0
        for step in range(max_new_tokens):
            token, logp = sample_next(logits, temperature, top_p, self.draw)
            token = torch.where(ended, torch.full_like(token, self.pad_id), token)
            tokens[active, step], logps[active, step] = token, logp
            steps = step + 1
            ended |= torch.isin(token, stops)
            if steps == max_new_tokens or not self._any_running(ended):
                break
            # Rows that have ended leave the batch (their cache too); one row stays so synced
            # ranks keep stepping.
            if int(ended.sum()) * 8 >= len(active):
                keep = (~ended).nonzero().squeeze(-1)
                keep = keep if len(keep) else torch.zeros(1, dtype=torch.long, device=device)
                cache.batch_select_indices(keep)
                active, ended, token = active[keep], ended[keep], token[keep]
                mask, position = mask[keep], position[keep]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = self.model(input_ids=token[:, None], attention_mask=mask, position_ids=position, cache=cache,
                             use_cache=True)
            position = position + 1
            logits = out.logits[:, -1].float()
        results = []
        for seq, lps in zip(tokens[:, :steps].tolist(), logps[:, :steps].tolist()):
            end = next((t for t, tok in enumerate(seq) if tok in self.stop_ids), None)
            keep_n = end + 1 if end is not None else len(seq)
            results.append(Completion(seq[:keep_n], lps[:keep_n], end is None))
        return results

    def _prefill_families(self, families: list[list[list[int]]], cache: Any, device: Any) -> tuple[Any, Any, Any, Any]:
        """Prefill each family's shared prefix once, copy its cache to every member, then the members'
        own tails in one forward (left-padded tails: the mask has a gap between prefix and tail).
        Returns the members' last-token logits, the cache, the attention mask and the positions."""
        import torch

        shared = [shared_prefix(f) for f in families]
        ids, prefix_mask = _left_padded([f[0][:n] for f, n in zip(families, shared)], self.pad_id)
        positions = (prefix_mask.cumsum(-1) - 1).clamp(min=0)
        _, cache = self._prefill(ids.to(device), prefix_mask.to(device), positions.to(device), cache)
        source = torch.tensor([k for k, f in enumerate(families) for _ in f], device=device)
        for layer in cache.layers:
            layer.batch_gather(source)
        tails, tail_mask = _left_padded([p[n:] for f, n in zip(families, shared) for p in f], self.pad_id)
        mask = torch.cat([prefix_mask[source.cpu()], tail_mask], dim=1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=tails.to(device), attention_mask=mask.to(device),
                         position_ids=positions[:, -tails.shape[1]:].to(device), cache=cache, use_cache=True,
                         logits_to_keep=1)
        return out.logits[:, -1], out.cache, mask, positions

    def _prefill(self, input_ids: Any, mask: Any, positions: Any, cache: Any) -> tuple[Any, Any]:
        """The prompts' last-token logits and their cache. Into a preallocated cache, in groups of
        rows of at most PREFILL_TOKENS tokens: a group's activations stay in the CPU's caches
        (48 prompts of 450 tokens prefilled 1.8x faster in groups of 8-16 rows on 2 cores)."""
        import torch

        rows, width = input_ids.shape
        step = max(1, PREFILL_TOKENS // width)
        if cache is None or step >= rows:
            out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, cache=cache,
                             use_cache=True, logits_to_keep=1)
            return out.logits[:, -1], out.cache
        parts, logits = [], []
        for start in range(0, rows, step):
            part = slice(start, start + step)
            out = self.model(input_ids=input_ids[part], attention_mask=mask[part], position_ids=positions[part],
                             use_cache=True, logits_to_keep=1)
            parts.append(out.cache)
            logits.append(out.logits[:, -1])
        for layer in range(len(parts[0].layers)):
            cache.update(torch.cat([p.layers[layer].keys for p in parts]),
                         torch.cat([p.layers[layer].values for p in parts]), layer)
        return torch.cat(logits), cache

    def _new_cache(self, rows: int, length: int) -> Any:
        """The chunk's KV cache (KV_CACHES); None lets the model build its DynamicCache."""
        config = getattr(self.model, "config", None)
        if self.kv_cache != "preallocated" or config is None:
            return None
        from generation.kv_cache import preallocated_cache

        return preallocated_cache(config, rows, length)

    def _any_running(self, ended: Any) -> bool:
        """Whether any row (on any rank, when synced) still samples."""
        running = (~ended).sum()
        if self.synced:
            import torch.distributed as dist

            running = running.clone()
            dist.all_reduce(running)
        return bool(running > 0)
