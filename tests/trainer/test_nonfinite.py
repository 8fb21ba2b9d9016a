"""NaN and inf stop every trainer cleanly: SFT, GRPO, multi-domain, MOPD and the reward model.

Each case poisons one optimizer step (step 2, after `checkpoints/step_1`): `loss` multiplies the
policy's logits by NaN, `grad` leaves the forward as it is and makes the gradients flowing back
through the logits infinite (a finite loss, a non-finite gradient norm). Only forwards with
gradients are poisoned, so rollouts still sample. Every case asserts the error (type, algorithm,
output folder, step, the checkpoint to resume from), that the checkpoint before it is intact
(loadable, finite) and, in process, that the weights were not updated; then it resumes from that
checkpoint without the poison and finishes. DeepSpeed ranks (1 CPU rank, gloo) get the poison from
a `sitecustomize` on PYTHONPATH that calls `install()` below.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from spec.nonfinite import NonFiniteLossError, check_finite
from tests.trainer.conftest import LENGTH

POISON_ENV = "CASCADE_TEST_POISON"
AT = 1  # the 0-based step poisoned: the error says "step 2", checkpoints/step_1 comes before it
ROOT = Path(__file__).resolve().parents[2]


class _InfGrad(torch.autograd.Function):
    """Identity forward; the gradient flowing back through it is multiplied by inf."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad * float("inf")


def _poison(output: Any, mode: str) -> Any:
    return output * float("nan") if mode == "loss" else _InfGrad.apply(output)


def poisonedbuild_trainer(real: Callable[..., Any], mode: str, at: int, seen: list[Any]) -> Callable[..., Any]:
    """trainer.stage.build_trainer whose trainers run step `at` with a poisoned LM head."""

    def make(*args: Any, **kwargs: Any) -> Any:
        trainer = real(*args, **kwargs)
        step_fn = trainer.train_step

        def train_step(step: int) -> dict[str, float]:
            if step != at:
                return step_fn(step)
            head = trainer.backend.model.get_output_embeddings()
            hook = head.register_forward_hook(lambda m, a, out: _poison(out, mode) if torch.is_grad_enabled() else None)
            try:
                return step_fn(step)
            finally:
                hook.remove()

        trainer.train_step = train_step
        seen.append(trainer)
        return trainer

    return make


def install(spec: str) -> None:
    """Poison `mode:step` in this process (a DeepSpeed rank: called from the sitecustomize)."""
    import trainer.stage as loop

    mode, at = spec.split(":")
    loop.build_trainer = poisonedbuild_trainer(loop.build_trainer, mode, int(at), [])


SITECUSTOMIZE = f"""import os
if os.environ.get({POISON_ENV!r}) and "LOCAL_RANK" in os.environ:  # torchrun ranks only
    from tests.trainer.test_nonfinite import install
    install(os.environ[{POISON_ENV!r}])
"""


# -- the runs ------------------------------------------------------------------------------------

@pytest.fixture
def two_domain_parquet(tmp_path):
    from curation.schemas import RL_SCHEMA

    rows = [{"row_id": str(i), "source": "t", "domain": "math" if i % 2 else "chat", "mode": "no_think",
             "prompt": f"What is {i} plus {i + 3}?", "answer": str(2 * i + 3)} for i in range(8)]
    path = tmp_path / "two_domains.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=RL_SCHEMA), path)
    return path


def _stage(algorithm: str, sft_kwargs: dict, grpo_kwargs: dict, two_domain_parquet: Path, **extra: Any) -> tuple:
    """(runner, config) of a 3-step stage of `algorithm` that checkpoints every step."""
    from trainer.config import GRPOConfig, SFTConfig
    from trainer.mopd import MOPDConfig
    from trainer.multi_domain import MultiDomainConfig
    from trainer.stage import run_stage

    common = {"max_steps": 3, "save_steps": 1, **extra}
    if algorithm == "sft":
        return run_stage, SFTConfig(**{**sft_kwargs, **common})
    rl = {**grpo_kwargs, "overlong_filtering": False, **common}  # the tiny model's rollouts mostly hit the cap
    if algorithm == "grpo":
        return run_stage, GRPOConfig(**rl)
    rl = {**rl, "dataset": str(two_domain_parquet)}
    if algorithm == "multi_domain":
        return run_stage, MultiDomainConfig(**{**rl, "rewards": [LENGTH], "mix": {"math": 1, "chat": 1}})
    return run_stage, MOPDConfig(**{**rl, "rewards": [], "teachers": {"default": rl["policy"]}, "num_generations": 2})


def _finite_loadable(model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def _stops_then_resumes(run: Callable[[Any], Any], config: Any, algorithm: str, mode: str,
                        unpoison: Callable[[], None]) -> NonFiniteLossError:
    """Run poisoned: assert the error and the intact checkpoint; unpoison, resume, assert it finishes."""
    out = Path(config.output_dir)
    with pytest.raises(NonFiniteLossError) as info:
        run(config)
    err = info.value
    ckpt = out / "checkpoints" / "step_1"
    assert (err.algorithm, err.stage, err.step, err.checkpoint) == (algorithm, str(out), AT + 1, str(ckpt))
    assert err.what == ("loss" if mode == "loss" else "gradient norm")
    message = str(err)
    assert f"{algorithm} stage {out}: non-finite {err.what}" in message and "at step 2;" in message
    assert f"last good checkpoint is {ckpt}: rerun with --resume" in message
    steps = sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.startswith("step_"))
    assert steps == ["step_1"]  # no step_2 (nor step_2.tmp), nothing rotated away
    assert json.loads((ckpt / "trainer_state.json").read_text())["step"] == 1
    assert not (out / "lineage.json").exists() and not (out / "model.safetensors").exists()
    assert not list(out.glob(".nonfinite_rank*.json"))  # the launcher consumed the ranks' records
    _finite_loadable(ckpt / "model")
    unpoison()
    result = run(config.model_copy(update={"resume": True}))
    assert result.summary["resumed_from_step"] == 1 and result.summary["steps"] == 3
    _finite_loadable(result.output_dir)
    return err


# -- torch backend: every policy trainer, in process ----------------------------------------------

@pytest.mark.parametrize("algorithm,mode", [("sft", "loss"), ("sft", "grad"), ("grpo", "loss"), ("grpo", "grad"),
                                       ("multi_domain", "loss"), ("mopd", "loss")])
def test_torch_stops_before_the_update_and_resumes(algorithm, mode, sft_kwargs, grpo_kwargs, two_domain_parquet,
                                                   monkeypatch):
    import trainer.stage as loop

    run, config = _stage(algorithm, sft_kwargs, grpo_kwargs, two_domain_parquet)
    seen: list[Any] = []
    real = loop.build_trainer
    monkeypatch.setattr(loop, "build_trainer", poisonedbuild_trainer(real, mode, AT, seen))

    def unpoison() -> None:
        # The poisoned step's update never happened: the weights in memory are step_1's.
        saved = load_file(Path(config.output_dir) / "checkpoints" / "step_1" / "model" / "model.safetensors")
        live = seen[0].backend.model.state_dict()
        assert all(torch.equal(live[k].cpu(), saved[k]) for k in saved)
        monkeypatch.setattr(loop, "build_trainer", real)

    _stops_then_resumes(run, config, algorithm, mode, unpoison)


# -- DeepSpeed backend: one CPU rank through torchrun ---------------------------------------------

# ZeRO 1-3 skip an update whose grad norm is NaN/inf and the backend raises after it; without ZeRO
# (stage 0) the backend checks the norm before the step. ~1 min each on CPU: marked slow.
@pytest.mark.slow
@pytest.mark.parametrize("algorithm,mode,zero", [("sft", "loss", 2), ("sft", "grad", 0), ("grpo", "loss", 3),
                                            ("grpo", "grad", 1)])
def test_deepspeed_stops_before_the_update_and_resumes(algorithm, mode, zero, sft_kwargs, grpo_kwargs,
                                                       two_domain_parquet, tmp_path, monkeypatch):
    run, config = _stage(algorithm, sft_kwargs, grpo_kwargs, two_domain_parquet, backend="deepspeed",
                         deepspeed={"zero_stage": zero, "num_processes": 1})
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(POISON_ENV, f"{mode}:{AT}")
    _stops_then_resumes(run, config, algorithm, mode, lambda: monkeypatch.delenv(POISON_ENV))


# -- the reward-model trainer (its own loop, no checkpoints) ----------------------------------------

@pytest.mark.parametrize("mode", ["loss", "grad"])
def test_reward_model_stops_before_the_update(mode, tiny_model_dir, tmp_path, monkeypatch):
    import rewards.reward_model as rm

    pairs = [{"prompt": f"What is {a} plus 2?", "chosen": f"The answer is {a + 2}.", "rejected": "minus minus"}
             for a in range(8)]
    config, out = rm.RMConfig(max_steps=3, batch_size=2, max_length=64, learning_rate=1e-3), tmp_path / "rm"
    real, calls = rm.pooled_scores, {"n": 0}

    def poisoned(model: Any, input_ids: Any, attention_mask: Any) -> Any:
        calls["n"] += 1  # one scoring forward per optimizer step
        scores = real(model, input_ids, attention_mask)
        return _poison(scores, mode) if calls["n"] == AT + 1 else scores

    monkeypatch.setattr(rm, "pooled_scores", poisoned)
    with pytest.raises(NonFiniteLossError) as info:
        rm.train_reward_model(tiny_model_dir, pairs, out, config)
    err = info.value
    assert (err.algorithm, err.stage, err.step, err.checkpoint) == ("reward_model", str(out), AT + 1, None)
    assert err.what == ("loss" if mode == "loss" else "gradient norm")
    assert f"reward_model stage {out}: non-finite" in str(err) and "a rerun starts the stage over" in str(err)
    assert not out.exists()  # nothing half-trained was written
    monkeypatch.setattr(rm, "pooled_scores", real)
    rm.train_reward_model(tiny_model_dir, pairs, out, config)
    assert json.loads((out / "rm_training.json").read_text())["steps"] == 3


# -- the guard itself ----------------------------------------------------------------------------------

def test_check_finite_reads_tensors_and_floats_and_the_error_pickles():
    import pickle

    check_finite(torch.tensor(1.5), 0)
    check_finite(2.0)
    with pytest.raises(NonFiniteLossError, match=r"non-finite gradient norm \(inf\) at step 4;"):
        check_finite(torch.tensor(float("inf")), 3, what="gradient norm")
    err = NonFiniteLossError("loss", float("inf"), 2).locate(step=9, algorithm="sft", stage="out", checkpoint="c")
    assert err.step == 2  # a step already known is kept
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.fields() == err.fields()
