"""Tiny datasets for trainer tests (the tiny model comes from tests/conftest.py)."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.chat import prompt_messages
from curation.schemas import RL_SCHEMA, SFT_SCHEMA


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    """Tests share 2 cores with other jobs: one intra-op thread avoids spin-wait slowdowns."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _write(rows, schema, path):
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


@pytest.fixture(scope="session")
def sft_parquet(tmp_path_factory):
    rng, rows = random.Random(0), []
    for i in range(24):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        mode = "think" if i % 2 == 0 else "no_think"
        answer = f"The answer is \\boxed{{{a + b}}}."
        response = f"<think>{a} + {b} = {a + b}</think>{answer}" if mode == "think" else answer
        messages = prompt_messages(f"What is {a} plus {b}?", mode) + [{"role": "assistant", "content": response}]
        rows.append({"row_id": str(i), "source": "t", "domain": "math", "mode": mode,
                     "messages": json.dumps(messages), "text": ""})
    return _write(rows, SFT_SCHEMA, tmp_path_factory.mktemp("sft") / "data.parquet")


@pytest.fixture(scope="session")
def rl_parquet(tmp_path_factory):
    rng, rows = random.Random(1), []
    for i in range(16):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        rows.append({"row_id": str(i), "source": "t", "domain": "math", "mode": "think" if i % 2 == 0 else "no_think",
                     "prompt": f"What is {a} plus {b}?", "answer": str(a + b)})
    return _write(rows, RL_SCHEMA, tmp_path_factory.mktemp("rl") / "data.parquet")


LENGTH = "tests.trainer.fake_rewards:LengthReward"


@pytest.fixture
def grpo_kwargs(tiny_model_dir, rl_parquet, tmp_path, cascade_home):
    return dict(policy=str(tiny_model_dir), dataset=str(rl_parquet), output_dir=str(tmp_path / "out"),
                rewards=[LENGTH], max_steps=2, prompts_per_step=2, num_generations=4, max_new_tokens=12,
                learning_rate=1e-3, seed=3, tensorboard=False, dtype="fp32")


@pytest.fixture
def sft_kwargs(tiny_model_dir, sft_parquet, tmp_path, cascade_home):
    return dict(policy=str(tiny_model_dir), dataset=str(sft_parquet), output_dir=str(tmp_path / "out"),
                max_steps=3, batch_size=2, learning_rate=1e-3, max_length=96, seed=3, tensorboard=False,
                dtype="fp32")
