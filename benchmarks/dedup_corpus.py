"""A synthetic SFT chat corpus with planted duplicates, for benchmarks/bench_dedup_scale.py (cached).

Shaped like the paper's SFT sources: OpenAI `messages` jsonl (an optional system turn, one
user turn, one assistant turn), several responses per prompt (`RESPONSES` rows share a
prompt, side by side), each row about 250 words (prompt 24-48, response 220-300 tokens, in
paragraphs). Words are real English (benchmarks/curation_corpus.py: stdlib docstrings,
Zipf-like frequencies). Planted, per chunk of `CHUNK` lines, each copy after its original:

* ~2% exact duplicates: a whole example re-cased (upper / lower / swapped case) and re-spaced
  (doubled spaces, extra newlines, padding), checked equal after `curation.text.normalize`;
* ~2% near duplicates: one or two words replaced, kept only when the true 5-word-shingle
  Jaccard of the dedup texts (system, prompt, response) is >= 0.8 and the normalised texts differ;
* ~0.1% benchmark leaks: a GSM8K question inside the prompt (decontamination drops them).

`truth` maps each planted line (its 0-based position, = the row's ORDINAL) to its original.
Chunk k depends only on (seed, k), so the corpus of R rows is a prefix of a larger one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from curation_corpus import cache_dir, vocabulary

from curation.text import normalize, normalize_words

CHUNK = 5000
RESPONSES = 5
EXACT, NEAR, LEAK = 0.02, 0.02, 0.001
SHINGLE, MIN_JACCARD = 5, 0.8
SYSTEMS = ["You are a helpful assistant.", "You are a careful tutor: explain every step.",
           "Answer concisely and cite the relevant standard library module when it helps."]


def _render(words: list[str], paragraph: int = 0) -> str:
    text = " ".join(words)
    if paragraph:
        parts = [" ".join(words[i:i + paragraph]) for i in range(0, len(words), paragraph)]
        text = "\n\n".join(parts)
    return re.sub(r" ([.,;:!?)])", r"\1", text)


def _row(system: str | None, prompt: str, response: str) -> dict:
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
    return {"messages": messages}


def dedup_text(row: dict) -> str:
    """The row's dedup text as the library builds it (system, prompt, response joined by newlines)."""
    return "\n".join(m["content"] for m in row["messages"])


def shingles(text: str, k: int = SHINGLE) -> set[str]:
    words = normalize_words(text)
    return {" ".join(words[i:i + k]) for i in range(len(words) - k + 1)} or ({" ".join(words)} if words else set())


def jaccard_true(a: str, b: str) -> float:
    x, y = shingles(a), shingles(b)
    return len(x & y) / max(1, len(x | y))


def _recase(text: str, rng: np.random.Generator) -> str:
    how = int(rng.integers(3))
    text = text.upper() if how == 0 else text.lower() if how == 1 else text.swapcase()
    text = text.replace(" ", "  ", int(rng.integers(1, 20))).replace("\n\n", "\n \n\n")
    return "  " + text + " \n"


def _exact_copy(row: dict, rng: np.random.Generator) -> dict | None:
    copy = {"messages": [{**m, "content": _recase(m["content"], rng)} for m in row["messages"]]}
    same = all(normalize(a["content"]) == normalize(b["content"]) for a, b in zip(row["messages"], copy["messages"]))
    return copy if same else None


def _near_copy(words: dict, row: dict, vocab: np.ndarray, rng: np.random.Generator) -> dict | None:
    """`row` with one or two words of its prompt or response replaced (`words`: their word lists)."""
    prompt, response = list(words["prompt"]), list(words["response"])
    for _ in range(int(rng.integers(1, 3))):
        target = prompt if rng.random() < 0.12 else response
        target[int(rng.integers(len(target)))] = str(vocab[int(rng.integers(len(vocab)))])
    messages = [dict(m) for m in row["messages"]]
    messages[-2]["content"], messages[-1]["content"] = _render(prompt), _render(response, 60)
    copy = {"messages": messages}
    a, b = dedup_text(row), dedup_text(copy)
    if normalize(a) == normalize(b) or jaccard_true(a, b) < MIN_JACCARD:
        return None
    return copy


def _chunk(c: int, n: int, seed: int, leaks: list[str]) -> tuple[list[dict], dict[str, list]]:
    """Lines of chunk `c` (`n` of them) and its planted copies {kind: [[position, original], ...]} (chunk-local)."""
    rng = np.random.default_rng([seed, c])
    vocab, probs = vocabulary(())
    n_exact, n_near = round(EXACT * n), round(NEAR * n)
    n_leak = int(rng.binomial(n, LEAK)) if leaks else 0
    n_base = n - n_exact - n_near
    lengths = [(int(rng.integers(24, 49)), int(rng.integers(220, 301))) for _ in range(n_base)]
    flat = vocab[rng.choice(len(vocab), size=sum(p + r for p, r in lengths), p=probs)].tolist()
    base, words, at, prompt_words, system = [], [], 0, None, None
    leak_rows = set(rng.choice(n_base, size=min(n_leak, n_base), replace=False).tolist())
    for i, (p, r) in enumerate(lengths):
        if i % RESPONSES == 0:  # a new prompt for the next RESPONSES rows
            prompt_words = flat[at:at + p]
            system = SYSTEMS[int(rng.integers(len(SYSTEMS)))] if rng.random() < 0.3 else None
        at += p
        response = flat[at:at + r]
        at += r
        prompt = _render(prompt_words)
        if i in leak_rows:
            prompt = f"{prompt} {leaks[int(rng.integers(len(leaks)))]}"
        base.append(_row(system, prompt + "?", _render(response, 60)))
        words.append({"prompt": prompt_words + ["?"], "response": response})
    pool = [i for i in range(n_base) if i not in leak_rows]
    picks = rng.choice(pool, size=min(len(pool), n_exact + n_near), replace=False).tolist()
    keyed = [(float(i), "base", i, row) for i, row in enumerate(base)]
    kinds = ["exact"] * n_exact + ["near"] * n_near
    for kind, src in zip(kinds, picks):
        for _ in range(20):
            copy = (_exact_copy(base[src], rng) if kind == "exact"
                    else _near_copy(words[src], base[src], vocab, rng))
            if copy is not None:
                keyed.append((float(rng.uniform(src + 0.5, n_base)), kind, src, copy))
                break
    keyed.sort(key=lambda t: t[0])
    where = {i: pos for pos, (_, kind, i, _) in enumerate(keyed) if kind == "base"}
    truth: dict[str, list] = {"exact": [], "near": [], "leak": sorted(where[i] for i in leak_rows)}
    for pos, (_, kind, src, _) in enumerate(keyed):
        if kind != "base":
            truth[kind].append([pos, where[src]])
    return [row for *_, row in keyed], truth


def make_corpus(rows: int, seed: int = 0, leaks: bool = True) -> tuple[Path, dict]:
    """(cached jsonl of `rows` lines, truth {exact/near: [[position, original position]], leak: [positions]})."""
    path = cache_dir() / f"dedup_sft_v1_{rows}_s{seed}{'' if leaks else '_noleak'}.jsonl"
    truth_path = path.with_suffix(".truth.json")
    if path.exists() and truth_path.exists():
        return path, json.loads(truth_path.read_text())
    bench: list[str] = []
    if leaks:
        from curation.sources import load_benchmark

        bench = [q.strip() for q in load_benchmark(builtin="gsm8k").column("question").to_pylist()]
    truth: dict[str, list] = {"exact": [], "near": [], "leak": []}
    tmp = path.with_suffix(".tmp")
    written = 0
    with open(tmp, "w", encoding="utf-8") as fh:
        for c in range((rows + CHUNK - 1) // CHUNK):
            n = min(CHUNK, rows - written)
            lines, planted = _chunk(c, CHUNK, seed, bench)  # always the whole chunk: prefixes agree
            lines = lines[:n]
            for kind in ("exact", "near"):
                truth[kind] += [[p + written, s + written] for p, s in planted[kind] if p < n]
            truth["leak"] += [p + written for p in planted["leak"] if p < n]
            fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines))
            written += n
    truth_path.write_text(json.dumps(truth))
    tmp.rename(path)
    return path, truth
