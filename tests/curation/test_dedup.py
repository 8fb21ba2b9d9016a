"""Exact + near-duplicate removal; numpy signatures are datasketch's, bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
from datasketch import MinHash

from curation.dedup import dedup
from curation.dedup_params import DedupParams, NearDupParams
from curation.minhash import minhash_signatures, shingle_sets
from curation.text import normalize_words, shingle_hash32


def test_signatures_equal_datasketch_minhash():
    texts = ["The quick brown fox jumps over the lazy dog, again and again.", "two words", "", "Café: ﬁne déjà vu!"]
    sets = shingle_sets(pa.array(texts), 3)
    sigs = minhash_signatures(sets, num_perm=64, seed=3, block=2)  # tiny blocks: several passes
    for text, sig in zip(texts, sigs):
        words = normalize_words(text)
        shingles = [" ".join(words[i : i + 3]) for i in range(len(words) - 2)] or ([" ".join(words)] if words else [])
        ref = MinHash(num_perm=64, seed=3, hashfunc=shingle_hash32)
        for s in shingles:
            ref.update(s.encode())
        assert np.array_equal(ref.hashvalues, sig), text


def _docs(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(3000)]
    return [" ".join(rng.choice(vocab) for _ in range(60)) for _ in range(n)]


def _table(name: str, prompts: list[str]) -> pa.Table:
    return pa.table({"row_id": [f"{name}{i}" for i in range(len(prompts))], "source": [name] * len(prompts), "prompt": prompts})


def test_exact_and_near_duplicates_within_and_across_tables():
    docs = _docs(200, 0)
    near = docs[3].split()
    near[30] = "changed"  # Jaccard of 5-shingles ~0.85
    a = _table("a", docs + [docs[10].upper() + " !!"])
    b = _table("b", [" ".join(near), "fresh prompt here", docs[20]])
    res = dedup([a, b])
    assert [t.num_rows for t in res.tables] == [200, 1]
    assert res.dropped.to_pylist() == [
        {"input": 0, "source": "a", "row_id": "a200", "reason": "exact_duplicate", "duplicate_of": "a10"},
        {"input": 1, "source": "b", "row_id": "b0", "reason": "near_duplicate", "duplicate_of": "a3"},
        {"input": 1, "source": "b", "row_id": "b2", "reason": "exact_duplicate", "duplicate_of": "a20"},
    ]
    assert res.dropped_counts(1) == {"exact_duplicate": 1, "near_duplicate": 1}
    # Below the threshold nothing happens; with near-dup off only exact duplicates go.
    assert dedup([a, b], DedupParams(near=NearDupParams(threshold=0.95))).dropped.num_rows == 2
    assert dedup([a, b], DedupParams(near=NearDupParams(enabled=False))).dropped.num_rows == 2
    assert dedup([a, b], DedupParams(exact=False, near=NearDupParams(enabled=False))).dropped.num_rows == 0


def test_reference_tables_only_remove_rows_from_others():
    rl = _table("rl", ["Solve 12 + 7 and explain", "another rl prompt text"])
    sft = _table("sft", ["solve 12 + 7, and explain!", "an sft only prompt"])
    res = dedup([sft], reference=[rl])
    assert res.tables[0].column("row_id").to_pylist() == ["sft1"]
    assert res.dropped.column("duplicate_of").to_pylist() == ["rl0"]


def test_recipe_mapping_builds_params():
    p = DedupParams.from_dict({"exact": False, "near": {"enabled": True, "shingle_size": 3, "num_perm": 64, "threshold": 0.7}})
    assert (p.exact, p.near.shingle_size, p.near.num_perm, p.near.threshold) == (False, 3, 64, 0.7)


def _paper_shaped_chat(path) -> list[dict]:
    """An OpenAI-messages chat source shaped like the paper's SFT data: several different
    responses per prompt (the paper: 7.8 per math prompt), plus one repeated whole example and
    one near-copy of a whole example."""
    import json

    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(4000)]
    rows = []
    for p in range(30):
        prompt = f"Problem {p}: " + " ".join(rng.choice(vocab) for _ in range(30))
        for r in range(6):
            answer = " ".join(rng.choice(vocab) for _ in range(50))
            rows.append({"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]})
    repeat = json.loads(json.dumps(rows[7]))
    repeat["messages"][0]["content"] = "  " + repeat["messages"][0]["content"].upper()  # equal once normalised
    near = json.loads(json.dumps(rows[20]))
    words = near["messages"][1]["content"].split()
    words[25] = "changed"  # one word of 80: Jaccard of the 5-shingles ~0.88
    near["messages"][1]["content"] = " ".join(words)
    rows += [repeat, near]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_several_responses_per_prompt_survive_a_paper_shaped_chat_source(tmp_path):
    from curation.dedup_params import DedupParams as Params
    from curation.sources import load_source

    _paper_shaped_chat(tmp_path / "chat.jsonl")
    loaded = load_source(tmp_path / "chat.jsonl", "auto", "chat", "chat")
    assert loaded.format == "openai" and loaded.table.num_rows == 182
    res = dedup([loaded.table])
    kept = res.tables[0]
    assert kept.num_rows == 180  # 30 prompts x 6 responses: every response stays
    assert len(set(kept.column("prompt").to_pylist())) == 30
    assert res.dropped_counts(0) == {"exact_duplicate": 1, "near_duplicate": 1}
    by_id = {r["row_id"]: r for r in loaded.table.to_pylist()}
    for d in res.dropped.to_pylist():  # each names the whole example it repeats
        assert by_id[d["duplicate_of"]]["prompt"].lower() == by_id[d["row_id"]]["prompt"].strip().lower()
    # The old unit, the prompt alone, keeps one response per prompt: what the recipe setting restores.
    per_prompt = dedup([loaded.table], Params(fields={"chat": ["prompt"]}), fields=["prompt"])
    assert per_prompt.tables[0].num_rows == 30 and per_prompt.dropped_counts(0) == {"exact_duplicate": 152}
