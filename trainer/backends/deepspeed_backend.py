"""DeepSpeed ZeRO 1/2/3 backend: the same stage loop on every rank, launched with torchrun.

`run()` (backend "deepspeed" in trainer.stage.BACKENDS) calls `launch()`, which starts
`num_processes` ranks of this module with torchrun and waits; each rank runs trainer.stage.execute
with a DeepSpeedBackend.
The optimizer is a client torch AdamW (`zero_allow_untested_optimizer`), so no fused_adam is
compiled; CPU ranks talk over gloo, GPU ranks over NCCL: the same code path runs on both.
Gradients: the loops normalise losses by the global target count; DeepSpeed averages over ranks,
so `grad_scale()` multiplies by the world size to make the result the exact global mean.
NaN/inf: a rank that stops on a NonFiniteLossError leaves its fields in output_dir, and `launch()`
raises the same error in the calling process (not just "torchrun exit code 1").
Process tree: on Linux torchrun and every rank get SIGKILL when their parent dies (prctl
PR_SET_PDEATHSIG), so a `kill -9` of `cascade train` or of a Dagster step takes the whole tree
down; no orphaned rank goes on writing into output_dir while the run is resumed.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spec.nonfinite import NonFiniteLossError, check_finite
from trainer.backend_api import Backend, grad_norm, lr_lambda, make_optimizer, resolve_dtype

if TYPE_CHECKING:  # ranks import as little as possible before die_with_parent()
    from trainer.stage import StageResult


class DeepSpeedBackend(Backend):
    def __init__(self, model: Any, config: Any, total_steps: int, warmup_steps: int,
                 schedule: str = "constant", min_lr_ratio: float = 0.0):
        import deepspeed
        import deepspeed.ops
        import torch

        cuda = torch.cuda.is_available()
        # DeepSpeed JIT-compiles its shared-memory all-reduce op at init; only inference_all_reduce
        # (tensor-parallel inference) uses it, never training. Measured: 80 s of C++ build on each
        # fresh machine, and /dev/shm segments per rank, for nothing.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
        self.rank = int(os.environ.get("RANK", 0))
        self.world_size = int(os.environ.get("WORLD_SIZE", 1))
        local = int(os.environ.get("LOCAL_RANK", 0))
        self.device = torch.device(f"cuda:{local}" if cuda else "cpu")
        if cuda:
            torch.cuda.set_device(self.device)
        self.autocast_dtype = resolve_dtype(config.dtype, self.device)
        self.zero_stage = config.deepspeed.zero_stage
        optimizer = make_optimizer(model, config)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_lambda(total_steps, warmup_steps, schedule, min_lr_ratio))
        zero: dict[str, Any] = {"stage": self.zero_stage}
        if config.deepspeed.offload_optimizer:
            zero["offload_optimizer"] = {"device": "cpu"}
        ds_config = {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,  # accumulation boundaries are set per backward
            "zero_optimization": zero,
            "zero_allow_untested_optimizer": True,
            "gradient_clipping": config.max_grad_norm or 0.0,
            "steps_per_print": 2**31 - 1,
            **config.deepspeed.extra,
        }
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model.to(self.device), optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)
        self.model = self.engine.module
        self.model.train()

    def grad_scale(self) -> float:
        return float(self.world_size)

    def _backward(self, loss: Any, last: bool) -> None:
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss)

    def step(self) -> float:
        """Under ZeRO (1-3) DeepSpeed computes the grad norm inside `engine.step()` and skips the
        update when it is NaN/inf (fp32 and bf16 alike), so the check follows the step; without
        ZeRO it would apply it, so the norm is checked first (the grads are whole on every rank)."""
        self.engine.set_gradient_accumulation_boundary(True)
        before = None
        if self.zero_stage == 0:
            before = grad_norm([p for p in self.model.parameters() if p.requires_grad])
            check_finite(before, what="gradient norm")
        self.engine.step()
        norm = self.engine.get_global_grad_norm() if before is None else before
        norm = float(norm) if norm is not None else float("nan")
        # fp16 loss scaling skips overflowing steps by design; anywhere else a skip is a NaN/inf.
        if not self.engine.was_step_applied() and not self.engine.fp16_enabled():
            raise NonFiniteLossError("gradient norm", norm if not math.isfinite(norm) else math.inf)
        return norm

    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def save_state(self, folder: Path) -> None:
        self.engine.save_checkpoint(str(Path(folder) / "deepspeed"), tag="state")

    def load_state(self, folder: Path) -> None:
        self.engine.load_checkpoint(str(Path(folder) / "deepspeed"), tag="state",
                                    load_optimizer_states=True, load_lr_scheduler_states=True)

    def full_state_dict(self) -> dict[str, Any] | None:
        if self.zero_stage < 3:
            return super().full_state_dict()
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(self.model.parameters()), modifier_rank=None):
            if not self.is_main:
                return None
            return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        import torch
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def gather_objects(self, obj: Any) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def synced_rollouts(self) -> bool:
        # ZeRO-3 gathers parameters inside every forward: ranks must keep stepping together
        # even when their own rollouts have all stopped.
        return self.zero_stage == 3 and self.world_size > 1

    def close(self, aborted: bool = False) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            if not aborted:  # a failed rank exits at once; torchrun then stops the others
                dist.barrier()
            dist.destroy_process_group()


def die_with_parent(expected_parent: int | None = None) -> None:
    """Linux: SIGKILL this process when its parent dies; exit now if it already has.

    The flag survives exec, so a wrapper sets it and then becomes torchrun. Elsewhere a no-op.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = expected_parent or os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the flag was set
        os._exit(1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _failure_files(out: Path) -> list[Path]:
    """The NonFiniteLossError records ranks left in `out` (`.nonfinite_rank<R>.json`), lowest rank first."""
    found = [p for p in out.glob(".nonfinite_rank*.json") if p.stem.removeprefix(".nonfinite_rank").isdigit()]
    return sorted(found, key=lambda p: int(p.stem.removeprefix(".nonfinite_rank")))


def launch(config: Any, trainer: str) -> None:
    """Run the stage on `deepspeed.num_processes` torchrun ranks; raise if any rank fails."""
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = out / ".deepspeed_launch.json"
    config_class = f"{type(config).__module__}:{type(config).__qualname__}"  # each rank rebuilds the same config
    spec.write_text(json.dumps({"trainer": trainer, "config_class": config_class, "config": config.model_dump(mode="json")}))
    env = dict(os.environ)
    home = Path(env.get("CASCADE_HOME", ".cascade"))
    env.setdefault("TORCH_EXTENSIONS_DIR", str(home / "torch_extensions"))  # compiled ops are reused
    env.setdefault("OMP_NUM_THREADS", str(config.torch_threads or 1))
    for stale in _failure_files(out):
        stale.unlink()
    n = config.deepspeed.num_processes
    wrapper = [sys.executable, "-m", "trainer.backends.deepspeed_backend", "--exec-under", str(os.getpid())]
    cmd = [*wrapper, sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(n),
           "--master_addr", "127.0.0.1", "--master_port", str(config.deepspeed.master_port or _free_port()),
           "-m", "trainer.backends.deepspeed_backend", str(spec)]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        rc = proc.wait()
    except BaseException:
        os.killpg(proc.pid, signal.SIGTERM)  # the whole session: torchrun and its ranks
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise
    if rc != 0:
        failures = _failure_files(out)
        if failures:  # a rank stopped on NaN/inf: the same error, here, with the same message
            fields = json.loads(failures[0].read_text())
            for path in failures:
                path.unlink()
            raise NonFiniteLossError(**fields)
        raise RuntimeError(f"deepspeed stage ({trainer}) failed (torchrun exit code {rc}); see the rank logs above")
    spec.unlink(missing_ok=True)


def run(config: Any, trainer: str) -> StageResult:
    """The stage on torchrun ranks (registered as backend "deepspeed"); `trainer`: its `module:Class`."""
    from trainer.stage import result_for

    launch(config, trainer)
    return result_for(config.output_dir)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--exec-under"]:  # `--exec-under PID CMD...`: become CMD, killed when PID dies
        die_with_parent(int(argv[1]))
        os.execv(argv[2], argv[2:])
    die_with_parent()  # a rank: killed when torchrun dies
    from spec.entry_points import import_target
    from trainer.stage import execute

    spec = json.loads(Path(argv[0]).read_text())
    config = import_target(spec["config_class"]).model_validate(spec["config"])
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    try:
        execute(config, spec["trainer"], DeepSpeedBackend, world_size=world, rank=rank)
    except NonFiniteLossError as err:  # for launch() to raise in the calling process
        (Path(config.output_dir) / f".nonfinite_rank{rank}.json").write_text(json.dumps(err.fields()))
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
