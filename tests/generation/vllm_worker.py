"""Runs under .venv-vllm/bin/python (tests/generation/test_vllm_engine.py starts it): exercises
the `vllm` engine and the trainer's vLLM rollouts on CPU, prints one JSON line of results."""

from __future__ import annotations

import json
import sys

MARK = "@@RESULT@@"


def rows(groups):
    return [[{"ids": s.token_ids, "text": s.text, "finish": s.finish_reason, "lps": s.logprobs} for s in g]
            for g in groups]


def main(job: dict) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from generation.engine import Engine, PromptTooLong, Request, Sampling
    from trainer.rollout import RolloutEngine
    from trainer.rollout_vllm import VLLMRolloutEngine

    model_dir, prompts = job["model"], job["prompts"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    rollouts = VLLMRolloutEngine(model_dir, tok, {"dtype": "float32", "enforce_eager": True, "max_model_len": 512,
                                                  "cpu_kvcache_space_gib": 1}, seed=0)
    engine = rollouts.engine
    out: dict = {"version": engine.version, "is_engine": isinstance(engine, Engine),
                 "is_rollout_engine": isinstance(rollouts, RolloutEngine)}
    requests = [Request(text=p) for p in prompts]
    greedy = Sampling(max_new_tokens=job["max_new_tokens"], temperature=0, logprobs=True)
    out["greedy"] = rows(engine.generate(requests, greedy, samples=2))
    hot = Sampling(max_new_tokens=12, temperature=1.0, seed=5, logprobs=True)
    out["sampled"] = [rows(engine.generate(requests, hot, samples=3)) for _ in range(2)]
    out["sampled_other_seed"] = rows(engine.generate(requests, Sampling(max_new_tokens=12, seed=6), samples=3))
    try:
        engine.generate(requests[:1] + [Request(text="x", token_ids=(5,) * 500)], Sampling(max_new_tokens=16))
        out["too_long"] = None
    except PromptTooLong as exc:
        out["too_long"] = list(exc.indexes)
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    groups = rollouts.generate(ids, 2, 8, 1.0, seed=1, return_logprobs=True)
    out["rollouts"] = [[{"ids": r.token_ids, "truncated": r.truncated, "lps": r.logprobs, "index": r.prompt_index}
                        for r in g] for g in groups]
    out["stop_ids"] = rollouts.stop_ids
    # A policy update: pushed weights change greedy outputs; pushing the originals back restores them.
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    before = rows(engine.generate(requests, Sampling(max_new_tokens=12, temperature=0)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "mlp" in name:
                p.mul_(-1.5)
    rollouts.sync_weights(model)
    changed = rows(engine.generate(requests, Sampling(max_new_tokens=12, temperature=0)))
    rollouts.sync_weights(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32))
    restored = rows(engine.generate(requests, Sampling(max_new_tokens=12, temperature=0)))
    out["reload"] = {"before": before, "changed": changed, "restored": restored}
    rollouts.close()
    return out


if __name__ == "__main__":
    print(MARK + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
