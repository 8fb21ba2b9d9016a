"""Count the two paths a new maintainer follows, by running them: hops and files on the call stack.

What: materializes a small recipe (one chat SFT source, one SFT stage, one math RL stage with the
`math` reward, one eval set) on a tiny random model in process, with wrappers on the functions
where each path ends. When one runs, the project frames on the Python stack are recorded:
frames from files of this repository's packages (not tests, scripts, Dagster or torch). The
figures are the ones issue-style path counts use, measured instead of read off by hand:

- `sft_step`: SFT checkpoint asset body → `SFTTrainer.train_step` (hops = project frames - 1).
- `reward_call`: RL checkpoint asset body → the math reward's own scoring (`MathReward._score_batch`),
  from inside a GRPO step.
- `source_to_checkpoint`: every project file on the stack at each output the `sources[]` entry
  flows through (its raw and clean tables, the SFT blend, the SFT step, the checkpoint's lineage
  record): the main line from a source to an SFT checkpoint.
- `called_files`: every project file with a function called while materializing the SFT path
  (the broad count, helpers included).

Why a script: the same measurement runs on any commit (`PYTHONPATH=<checkout> python
scripts/call_paths.py`), so a before/after comparison needs no hand counting, and
tests/architecture/test_call_paths.py keeps the figures from growing back.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from spec.hashing import PLATFORM_PACKAGES

COMPREHENSIONS = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")
"""Frames that are not hops (Python 3.12 inlines them)."""


def _root() -> Path:
    import spec

    return Path(spec.__file__).resolve().parent.parent


def _project_file(filename: str, root: Path) -> str | None:
    try:
        rel = Path(filename).resolve().relative_to(root)
    except ValueError:
        return None
    return str(rel) if rel.parts and rel.parts[0] in PLATFORM_PACKAGES else None


def project_stack(frame: Any, root: Path) -> list[str]:
    """`file:function` of every project frame from `frame` outwards, outermost first; in a thread,
    continued by the stack that started the thread (so a reward run under a timeout thread counts
    the hops that led to it)."""
    frames = []
    while frame is not None:
        rel = _project_file(frame.f_code.co_filename, root)
        if rel is not None and frame.f_code.co_name not in COMPREHENSIONS:
            frames.append(f"{rel}:{frame.f_code.co_name}")
        frame = frame.f_back
    parent = getattr(threading.current_thread(), "_started_from", [])
    return parent + frames[::-1]


class _Recorder:
    """A profile hook: every project file entered, and the stack at each call of a target code object."""

    def __init__(self, targets: dict[Any, str], root: Path):
        self.targets, self.root = targets, root
        self.seen: dict[str, list[list[str]]] = {}
        self.called: set[str] = set()
        self.collect_called = False

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        label = self.targets.get(frame.f_code)
        if label is not None:
            self.seen.setdefault(label, []).append(project_stack(frame, self.root))
        if self.collect_called:
            rel = _project_file(frame.f_code.co_filename, self.root)
            if rel is not None:
                self.called.add(rel)


def _thread_start_recording(root: Path) -> Callable[[], None]:
    original = threading.Thread.start

    def start(self: threading.Thread) -> None:
        self._started_from = project_stack(sys._getframe(1), root)  # type: ignore[attr-defined]
        original(self)

    threading.Thread.start = start  # type: ignore[method-assign]
    return lambda: setattr(threading.Thread, "start", original)


def _recipe(home: Path) -> dict[str, Any]:
    gen = str(home / "samples")
    return {
        "name": "paths", "seed": 7, "model": {"base": "tiny"},
        "sources": [
            {"name": "chat", "domain": "chat", "path": f"{gen}/chat.jsonl", "generate": "chat_sft", "limit": 8},
            {"name": "arith", "domain": "math", "path": f"{gen}/arith.jsonl", "generate": "math_rl", "limit": 8},
        ],
        "benchmarks": [{"name": "eval_arith", "path": f"{gen}/eval_arith.jsonl", "generate": "math_eval",
                        "domain": "math", "eval_domain": "math", "eval_limit": 2}],
        "sft_stages": [{"name": "sft", "sources": ["chat"], "max_tokens": 128,
                        "train": {"epochs": 1, "batch_size": 2, "max_length": 128, "max_steps": 1}}],
        "rl_stages": [{"name": "math_rl", "kind": "math", "sources": ["arith"], "rewards": [{"name": "math"}],
                       "train": {"max_steps": 1, "prompts_per_step": 2, "num_generations": 2, "max_new_tokens": 8}}],
        "evals": {"max_new_tokens": 8, "modes": ["no_think"], "training_signal_blocking": False},
    }


def _from_asset(stack: list[str]) -> list[str]:
    """The stack from the innermost asset body (a frame in assets/) down."""
    starts = [i for i, f in enumerate(stack) if f.startswith("assets/")]
    return stack[starts[0]:] if starts else stack


def _path_figures(stack: list[str]) -> dict[str, Any]:
    files = list(dict.fromkeys(f.split(":")[0] for f in stack))
    return {"hops": len(stack) - 1, "files": len(files), "file_list": files, "stack": stack}


def measure(home: Path) -> dict[str, Any]:
    """Materialize the small recipe under `home` and return the path figures."""
    os.environ["CASCADE_HOME"] = str(home)
    import dagster as dg

    from assets import build_definitions
    from curation import versioning
    from dagster_project.recipe import parse_recipe
    from rewards.math import MathReward
    from spec import lineage
    from trainer.sft import SFTTrainer

    root = _root()
    targets = {SFTTrainer.train_step: "sft_step", MathReward._score_batch: "reward_call",
               versioning.write_versioned: "write", versioning.write_versioned_batches: "write",
               lineage.write_record: "record"}
    recorder = _Recorder({f.__code__: label for f, label in targets.items()}, root)
    restore_threads = _thread_start_recording(root)
    seen = recorder.seen
    sys.setprofile(recorder)
    threading.setprofile(recorder)
    try:
        defs = build_definitions(parse_recipe(_recipe(home)))
        every = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)]
        by_key = {a.key.path[-1]: a for a in every}
        path_names = ("raw_chat", "clean_chat", "sft_data", "sft")
        downstream = dg.AssetSelection.assets(by_key["raw_chat"]).downstream().resolve(every)
        before = [a for a in every if not any(k in downstream for k in a.keys)]
        after = [a for a in every if a.key.path[-1] not in path_names and a not in before
                 and not a.key.path[-1].startswith("eval") and a.key.path[-1] != "forgetting_matrix"]
        instance = dg.DagsterInstance.ephemeral()
        resources = getattr(defs, "resources", None) or {}
        assert dg.materialize(before, instance=instance, resources=resources).success
        seen.clear()
        recorder.collect_called = True  # the SFT path alone: the source's raw and clean tables, the blend, the checkpoint
        result = dg.materialize([by_key[n] for n in path_names], instance=instance, resources=resources)
        recorder.collect_called = False
        assert result.success
        sft_outputs = {k: list(v) for k, v in seen.items()}
        assert dg.materialize(after, instance=instance, resources=resources).success
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        restore_threads()
    line: list[str] = []
    for label in ("write", "sft_step", "record"):
        for stack in sft_outputs.get(label, []):
            line += [f.split(":")[0] for f in _from_asset(stack)]
    main_line = sorted(set(line))
    return {
        "sft_step": _path_figures(_from_asset(seen["sft_step"][0])),
        "reward_call": _path_figures(_from_asset(seen["reward_call"][0])),
        "source_to_checkpoint": {"files": len(main_line), "file_list": main_line},
        "called_files": {"files": len(recorder.called), "file_list": sorted(recorder.called)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print every stack as JSON")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="cascade-paths-") as tmp:
        figures = measure(Path(tmp))
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    for name in ("sft_step", "reward_call"):
        f = figures[name]
        print(f"{name}: {f['hops']} hops, {f['files']} files")
        print("   " + " -> ".join(f["stack"]))
    for name in ("source_to_checkpoint", "called_files"):
        print(f"{name}: {figures[name]['files']} files: {', '.join(figures[name]['file_list'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
