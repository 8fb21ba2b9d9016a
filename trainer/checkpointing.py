"""Resumable checkpoints: output_dir/checkpoints/step_N holds everything a run needs to go on.

Contents: HF model folder (weights + tokenizer), backend state (optimizer + scheduler, or the
DeepSpeed engine checkpoint), RNG states of python/numpy/torch per rank, and `trainer_state.json`
(step, data-order state, loop extras). A checkpoint is written into `step_N.tmp` and renamed
when complete, so a kill -9 mid-write never leaves a checkpoint that looks finished.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHECKPOINTS = "checkpoints"


@dataclass
class DataOrder:
    """Deterministic epoch-wise shuffled order over `n` items; state = (epoch, position, retired).

    The permutation of an epoch is a pure function of (seed, epoch, retired items), so saving
    it is enough to resume the exact same data stream. With `strata` (one label per item, e.g.
    the reasoning mode) each label is shuffled on its own and the labels are interleaved, so any
    run of consecutive items is balanced across labels (half /think, half /no_think batches)
    until the smaller labels run out for the epoch. `retire(items)` drops items from every epoch
    after the current one; the current epoch's order never changes under its position.
    """

    n: int
    seed: int
    epoch: int = 0
    position: int = 0
    shuffle: bool = True
    strata: list[str] | None = None
    retired: dict[int, int] = field(default_factory=dict)  # item -> first epoch without it

    def active(self, epoch: int | None = None) -> list[int]:
        """Items drawn in `epoch` (default: the current one), in index order."""
        epoch = self.epoch if epoch is None else epoch
        return [i for i in range(self.n) if self.retired.get(i, epoch + 1) > epoch]

    def retire(self, items: list[int]) -> None:
        """Leave `items` out of every epoch after the current one."""
        for i in items:
            self.retired.setdefault(int(i), self.epoch + 1)

    def _perm(self) -> list[int]:
        import numpy as np

        items = self.active()
        if not self.shuffle:
            return items
        rng = np.random.default_rng([self.seed, self.epoch])
        labels = sorted({self.strata[i] for i in items}) if self.strata else []
        if len(labels) < 2:
            return [items[j] for j in rng.permutation(len(items))]
        pools = [[i for i in items if self.strata[i] == label] for label in labels]
        pools = [[pool[j] for j in rng.permutation(len(pool))] for pool in pools]
        return [pool[k] for k in range(max(map(len, pools))) for pool in pools if k < len(pool)]

    def take(self, k: int) -> list[int]:
        """The next k indices, crossing epoch boundaries as needed."""
        if self.n == 0:
            raise ValueError("cannot draw from an empty dataset")
        out: list[int] = []
        perm = self._perm()
        while len(out) < k:
            if self.position >= len(perm):
                self.epoch, self.position = self.epoch + 1, 0
                perm = self._perm()
                if not perm:
                    raise ValueError("every item is retired: nothing left to draw")
            take = min(k - len(out), len(perm) - self.position)
            out += perm[self.position:self.position + take]
            self.position += take
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "retired": sorted(self.retired.items())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self.retired = {int(i): int(e) for i, e in state.get("retired", [])}


def capture_rng() -> dict[str, Any]:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int, deterministic: bool) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def save_model_folder(folder: Path, backend: Any, tokenizer: Any) -> None:
    """HF layout (model.safetensors, config, generation_config, tokenizer + chat template)."""
    state = backend.full_state_dict()  # collective under ZeRO-3: every rank calls it
    if backend.is_main:
        folder.mkdir(parents=True, exist_ok=True)
        backend.model.save_pretrained(folder, state_dict=state, safe_serialization=True)
        tokenizer.save_pretrained(folder)


def save_checkpoint(output_dir: Path, step: int, backend: Any, tokenizer: Any,
                    trainer_state: dict[str, Any], keep: int = 2) -> Path:
    """Write checkpoints/step_{step} atomically; keep the newest `keep` complete ones."""
    import torch

    root = Path(output_dir) / CHECKPOINTS
    final = root / f"step_{step}"
    tmp = root / f"step_{step}.tmp"
    if backend.is_main:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    backend.barrier()
    save_model_folder(tmp / "model", backend, tokenizer)
    backend.save_state(tmp)
    torch.save(capture_rng(), tmp / f"rng_rank{backend.rank}.pt")
    backend.barrier()
    if backend.is_main:
        (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **trainer_state}, indent=1))
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        for old in complete_checkpoints(output_dir)[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    backend.barrier()
    return final


def complete_checkpoints(output_dir: Path) -> list[Path]:
    """Finished checkpoints, oldest first (unfinished `.tmp` folders are ignored)."""
    root = Path(output_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_")
             and p.name[5:].isdigit() and (p / "trainer_state.json").exists()]
    return sorted(found, key=lambda p: int(p.name[5:]))


def latest_checkpoint(output_dir: Path) -> Path | None:
    found = complete_checkpoints(output_dir)
    return found[-1] if found else None


def load_checkpoint(folder: Path, backend: Any) -> dict[str, Any]:
    """Restore backend state and this rank's RNG; return trainer_state (step, data order, ...).

    The model weights themselves are loaded by the caller from folder/"model" before the
    backend is built (DeepSpeed restores them again from its own engine checkpoint).
    """
    import torch

    backend.load_state(folder)
    rng = folder / f"rng_rank{backend.rank}.pt"
    if rng.exists():
        restore_rng(torch.load(rng, weights_only=False))
    return json.loads((folder / "trainer_state.json").read_text())
