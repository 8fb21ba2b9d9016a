"""A small deterministic engine implementing generation.engine.Engine, for tests and benchmarks.

A completion is a pure function of (prompt text, index of the sample within the call, call
seed, max_new_tokens): `responder(prompt, i, seed)` when given, else a fixed pattern. One
"token" is one character, so `max_new_tokens` truncates with finish_reason `length`. Every
call is counted (`calls`, `requests`, `samples`) so tests can assert what was generated.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence

from generation.engine import PromptTooLong, Request, Sample, Sampling

Responder = Callable[[str, int, int], str]


def default_responder(prompt: str, i: int, seed: int) -> str:
    tag = hashlib.blake2b(f"{prompt}|{i}|{seed}".encode(), digest_size=4).hexdigest()
    if " /no_think<|im_end|>" in prompt.rsplit("<|im_start|>user", 1)[-1]:
        return f"answer {tag}"
    return f"<think>reasoning {tag}</think>answer {tag}"


class FakeEngine:
    """Engine protocol without a model: deterministic text, char-level token ids."""

    name = "fake"

    def __init__(self, model: str | None = None, responder: Responder | None = None, delay_s: float = 0.0,
                 version: str = "fake-1", max_prompt_chars: int | None = None, **options: Any):
        self.model, self.responder, self.delay_s, self._version = model, responder or default_responder, delay_s, version
        self.max_prompt_chars = max_prompt_chars  # longer prompts raise PromptTooLong, like a real engine
        self.calls = self.requests = self.samples = 0
        self.seeds: list[int] = []

    @property
    def version(self) -> str:
        return self._version

    def generate(self, requests: Sequence[Request], sampling: Sampling, samples: int = 1) -> list[list[Sample]]:
        if self.delay_s:
            import time

            time.sleep(self.delay_s)
        self.calls += 1
        if self.max_prompt_chars is not None:
            long = [i for i, r in enumerate(requests) if len(r.text) > self.max_prompt_chars]
            if long:
                raise PromptTooLong(long, self.max_prompt_chars)
        self.requests += len(requests)
        self.samples += len(requests) * samples
        self.seeds.append(sampling.seed)
        out = []
        for r, req in enumerate(requests):
            row = []
            for i in range(samples):
                text = self.responder(req.text, i, sampling.seed)
                finish = "stop"
                if len(text) > sampling.max_new_tokens:
                    text, finish = text[: sampling.max_new_tokens], "length"
                ids = [ord(c) % 50000 for c in text] + ([0] if finish == "stop" else [])
                logprobs = [-0.5] * len(ids) if sampling.logprobs else None
                row.append(Sample(r, i, text, ids, finish, logprobs))
            out.append(row)
        return out

    def close(self) -> None:
        pass


def arithmetic_responder(prompt: str, i: int, seed: int) -> str:
    """Answers 'What is A + B?': even samples correctly, odd ones off by one (in the prompt's mode)."""
    import re

    match = re.search(r"What is (\d+) \+ (\d+)\?", prompt)
    total = sum(map(int, match.groups())) if match else 0
    answer = f"The answer is \\boxed{{{total + i % 2}}}"
    return answer if " /no_think<|im_end|>" in prompt else f"<think>adding</think>{answer}"


class ArithmeticEngine(FakeEngine):
    """A FakeEngine that solves sums on even samples (for verifier tests that need passes)."""

    def __init__(self, model: str | None = None, **options: Any):
        super().__init__(model, responder=arithmetic_responder, **options)
