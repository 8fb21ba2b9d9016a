"""The hf engine on several processes (generation.hf_workers): the same answers as one process,
weights pushed from a trainer's module, workers stopped by PID, failures reported."""

from __future__ import annotations

import os
import signal

import pytest

from generation.engine import PromptTooLong, Request, Sampling
from generation.hf_workers import HFWorkers, resolve_workers, shares

PROMPTS = ["<|im_start|>user\nadd 2 and 3<|im_end|>\n<|im_start|>assistant\n",
           "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
           "<|im_start|>user\nwrite a long story about a cat and a dog<|im_end|>\n<|im_start|>assistant\n",
           "<|im_start|>user\n7<|im_end|>\n<|im_start|>assistant\n",
           "<|im_start|>user\nname three colours please<|im_end|>\n<|im_start|>assistant\n"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead: only its exit status is left
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def _texts(groups):
    return [[(s.text, tuple(s.token_ids), s.finish_reason) for s in group] for group in groups]


@pytest.fixture(scope="module")
def workers(tiny_model_dir):
    engine = HFWorkers(tiny_model_dir, workers=2, dtype="float32", batch_size=1)
    yield engine
    pids = engine.pids
    engine.close()
    assert not any(_alive(p) for p in pids)


def test_shares_deal_length_sorted_requests_in_turn():
    prompts = [[i] * n for i, n in enumerate([5, 1, 9, 3, 7])]
    assert shares(prompts, 2) == [[1, 0, 2], [3, 4]]
    assert shares([[1], [2, 3]], 3) == [[0], [1], []]
    # A prompt rendered in two modes: one family, one worker.
    think, no_think = list(range(40)) + [7, 8], list(range(40)) + [9]
    assert shares([[5] * 50, think, no_think], 2) == [[1, 2], [0]]
    assert resolve_workers(3) == 3 and resolve_workers("auto") >= 1
    with pytest.raises(ValueError):
        resolve_workers(0)


def test_greedy_answers_equal_one_process(workers, tiny_model_dir):
    from generation.hf import HFEngine

    one = HFEngine(tiny_model_dir, dtype="float32", batch_size=1)
    sampling = Sampling(max_new_tokens=8, temperature=0.0)
    requests = [Request(p) for p in PROMPTS]
    got = workers.generate(requests, sampling)
    assert [[s.request_index for s in g] for g in got] == [[i] for i in range(len(PROMPTS))]
    assert _texts(got) == _texts(one.generate(requests, sampling))
    assert workers.stop_ids == one.stop_ids
    one.close()


def test_seeded_samples_repeat_and_shares_draw_differently(workers):
    sampling = Sampling(max_new_tokens=6, temperature=1.0, seed=5, logprobs=True)
    requests = [Request(PROMPTS[1])] * 2  # the same prompt, one in each worker's share
    assert shares([[1, 2]] * 2, 2) == [[0], [1]]
    first, again = workers.generate(requests, sampling, samples=2), workers.generate(requests, sampling, samples=2)
    assert _texts(first) == _texts(again)
    assert all(len(s.logprobs) == len(s.token_ids) for g in first for s in g)
    assert _texts([first[0]]) != _texts([first[1]])  # the workers' seeds differ: same prompt, other draws


def test_pushed_weights_are_what_the_workers_sample(tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from generation.hf import HFEngine

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    local = HFEngine.from_loaded(model, AutoTokenizer.from_pretrained(tiny_model_dir), batch_size=1)
    engine = HFWorkers(tiny_model_dir, workers=2, dtype="float32", batch_size=1)
    try:
        sampling = Sampling(max_new_tokens=8, temperature=0.0)
        requests = [Request(p) for p in PROMPTS]
        before = engine.generate(requests, sampling)
        engine.sync_weights(model)
        after = engine.generate(requests, sampling)
        assert _texts(after) == _texts(local.generate(requests, sampling))
        assert _texts(after) != _texts(before)
    finally:
        engine.close()


def test_too_long_prompts_are_named_before_sampling(workers):
    context = workers.context_length
    with pytest.raises(PromptTooLong) as err:
        workers.generate([Request(PROMPTS[0]), Request("x " * (context + 10))], Sampling(max_new_tokens=4))
    assert err.value.indexes == (1,)


@pytest.mark.parametrize("reaped", [False, True], ids=["killed", "already_dead"])
def test_a_killed_worker_fails_the_call_with_its_pid(tiny_model_dir, reaped):
    """Killed just before the call, the worker dies while it is sent to or waited on; already dead, its
    pipe is closed and the send itself fails (a BrokenPipeError once escaped as such under load)."""
    engine = HFWorkers(tiny_model_dir, workers=2, dtype="float32", batch_size=1)
    try:
        victim = engine.pids[1]
        os.kill(victim, signal.SIGKILL)
        if reaped:
            engine._procs[1].wait(timeout=60)
        with pytest.raises(RuntimeError, match=f"pid {victim}.* exited with code -9"):
            engine.generate([Request(p) for p in PROMPTS], Sampling(max_new_tokens=4, temperature=0.0))
    finally:
        pids = engine.pids
        engine.close()
    assert not any(_alive(p) for p in pids)
