"""Built-in backend "torch": one process, CPU or one GPU, plain torch AdamW + LambdaLR (trainer.stage runs it in process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spec.nonfinite import check_finite
from trainer.backend_api import Backend, grad_norm, lr_lambda, make_optimizer, resolve_dtype


class TorchBackend(Backend):
    def __init__(self, model: Any, config: Any, total_steps: int, warmup_steps: int,
                 schedule: str = "constant", min_lr_ratio: float = 0.0):
        import torch

        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.to(self.device)
        self.model.train()
        self.autocast_dtype = resolve_dtype(config.dtype, self.device)
        self.max_grad_norm = config.max_grad_norm
        self.optimizer = make_optimizer(model, config)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(total_steps, warmup_steps, schedule, min_lr_ratio))

    def _backward(self, loss: Any, last: bool) -> None:
        loss.backward()

    def step(self) -> float:
        import torch

        params = [p for p in self.model.parameters() if p.requires_grad]
        norm = grad_norm(params)
        check_finite(norm, what="gradient norm")  # before clipping scales the grads by NaN
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grads_with_norm_(params, self.max_grad_norm, norm, foreach=False)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def save_state(self, folder: Path) -> None:
        import torch

        torch.save({"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()},
                   Path(folder) / "optimizer.pt")

    def load_state(self, folder: Path) -> None:
        import torch

        state = torch.load(Path(folder) / "optimizer.pt", map_location=self.device, weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

