"""The `hf` engine on several CPU processes: one model copy per core, each decoding its share.

What: `HFWorkers` implements generation.engine.Engine (and `sync_weights`, so it also serves as
a GRPO rollout engine through trainer.rollout.EngineRollouts) by starting `workers` processes
(`python -m generation.hf_workers`, each an `HFEngine` on `threads` torch threads), giving each
an interleaved share of the requests (sorted by prompt length, so every share holds the same
mix of short and long prompts; prompts that share a long prefix stay together, so the sampler
prefills it once) and putting the answers back in request order.

Why: a 135M model's decode step is a few hundred small matrix products and element-wise ops,
too small to split across cores. Measured on 2 cores (SmolLM2-135M, bf16, 100 rows x 48 new
tokens, 50-token prompts): 11.9 s on one torch thread, 11.0 s on two; two single-thread
processes decode twice the rows in the first time. Prefill splits better (1.5x on two threads),
so the processes gain less there.

Contract details (as HFEngine's, with these differences):
* a call's samples depend on how its requests were shared out: worker w seeds its part with
  `seed + w * WORKER_SEED_STRIDE` (worker 0 keeps `seed`); the same requests, settings, seed
  and worker count give the same samples. Greedy rows do not depend on the seed; they match
  the one-process engine up to the float rounding of other batch shapes;
* `sync_weights(model)` writes the model's weights once (safetensors, under /dev/shm where it
  exists) and every worker loads them before its next call: GRPO pushes after each update;
* a worker that dies or raises fails the call with its traceback; `close` stops every worker
  by PID (terminate, then kill) and removes the weights file.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection
from typing import Any, NoReturn, Sequence

from generation.engine import Request, Sample, Sampling

WORKER_SEED_STRIDE = 1_000_003
"""Worker w samples its share with seed + w * this (worker 0 keeps the call's seed)."""


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def resolve_workers(workers: int | str) -> int:
    """`auto` -> one worker per usable core (1 on a one-core machine); an int stays."""
    if workers == "auto":
        return max(1, usable_cores())
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int or 'auto', got {workers!r}")
    return workers


def open_hf(model: str | os.PathLike, workers: int | str = 1, **options: Any) -> Any:
    """The `hf` engine on `workers` CPU processes (`auto`: one per usable core), or in this process
    (generation.hf.HFEngine) when that comes to one or a GPU is visible."""
    import torch

    if resolve_workers(workers) > 1 and not torch.cuda.is_available():
        return HFWorkers(model, workers, **options)
    from generation.hf import HFEngine

    return HFEngine(model, **options)


def shares(prompts: Sequence[Sequence[int]], n: int) -> list[list[int]]:
    """Request indexes per worker: prefix families (generation.hf_sampler.prefix_families: a row's
    renderings in both modes prefill their common prefix once) kept together, in order of length,
    dealt out in turn (each share mixes short and long)."""
    from generation.hf_sampler import prefix_families

    families = prefix_families(prompts)
    return [[i for f in families[w::n] for i in f] for w in range(n)]


class HFWorkers:
    """`workers` HFEngine processes behind one Engine (see the module docstring)."""

    name = "hf"

    def __init__(self, model: str | os.PathLike, workers: int | str = "auto", dtype: Any = "auto",
                 batch_size: int = 64, threads: int | None = None, draw: str = "inverse_cdf"):
        """Start the workers on the model folder `model`. `threads`: torch threads per worker
        (None: the usable cores shared out evenly, at least 1); the rest as HFEngine."""
        from transformers import AutoConfig, AutoTokenizer

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.count = resolve_workers(workers)
        self.threads = threads or max(1, usable_cores() // self.count)
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.context_length = getattr(AutoConfig.from_pretrained(model), "max_position_embeddings", None)
        self._weights_dir: str | None = None
        self._pending_weights: str | None = None
        self._procs: list[subprocess.Popen] = []
        self._conns: list[Connection] = []
        try:
            for _ in range(self.count):
                self._start_worker()
            self._all(("load", str(model), str(dtype), batch_size, draw))
        except BaseException:
            self.close()
            raise
        self.stop_ids = self._all(("stop_ids",))[0]

    def _start_worker(self) -> None:
        ours, theirs = socket.socketpair()
        env = os.environ | {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads),
                            "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        proc = subprocess.Popen([sys.executable, "-m", "generation.hf_workers", str(theirs.fileno()),
                                 str(self.threads)], pass_fds=(theirs.fileno(),), env=env)
        theirs.close()
        self._procs.append(proc)
        self._conns.append(Connection(ours.detach()))

    @property
    def pids(self) -> list[int]:
        """The workers' process ids."""
        return [p.pid for p in self._procs]

    @property
    def version(self) -> str:
        from generation.hf import hf_version

        return hf_version()

    def _all(self, message: tuple) -> list[Any]:
        """Send one message to every worker, then collect every answer."""
        return self._exchange([message] * self.count)

    def _exchange(self, messages: Sequence[tuple | None]) -> list[Any]:
        """Send messages[w] to worker w (None: nothing), then wait for each answer in turn."""
        for w, (conn, message) in enumerate(zip(self._conns, messages)):
            if message is not None:
                try:
                    conn.send(message)
                except OSError:  # a worker that already died: its pipe is closed (BrokenPipeError)
                    self._raise_exited(w)
        answers = []
        for w, (conn, message) in enumerate(zip(self._conns, messages)):
            if message is None:
                answers.append(None)
                continue
            try:
                status, value = conn.recv()
            except (EOFError, OSError):
                self._raise_exited(w)
            if status == "error":
                raise RuntimeError(f"hf worker {w} (pid {self._procs[w].pid}) failed:\n{value}")
            answers.append(value)
        return answers

    def _raise_exited(self, w: int) -> NoReturn:
        code = self._procs[w].wait()
        raise RuntimeError(f"hf worker {w} (pid {self._procs[w].pid}) exited with code {code}") from None

    def sync_weights(self, model: Any) -> None:
        """Make every worker sample from `model`'s current weights (written now, loaded at the next call)."""
        from safetensors.torch import save_model

        if self._weights_dir is None:
            self._weights_dir = tempfile.mkdtemp(prefix="cascade-weights-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        path = os.path.join(self._weights_dir, "model.safetensors")
        save_model(model, path)
        self._pending_weights = path

    def generate(self, requests: Sequence[Request], sampling: Sampling, samples: int = 1) -> list[list[Sample]]:
        """`samples` completions per request; raises PromptTooLong before sampling any."""
        from generation.hf import checked_prompt_ids

        prompts = checked_prompt_ids(self.tokenizer, requests, sampling, samples, self.context_length)
        if not prompts:
            return []
        if self._pending_weights:
            self._all(("weights", self._pending_weights))
            self._pending_weights = None
        parts = shares(prompts, self.count)
        messages = [("generate", [Request(requests[i].text, tuple(prompts[i])) for i in part],
                     _worker_sampling(sampling, w), samples) if part else None
                    for w, part in enumerate(parts)]
        out: list[list[Sample]] = [[] for _ in requests]
        for part, groups in zip(parts, self._exchange(messages)):
            for i, group in zip(part, groups or []):
                out[i] = [_renumbered(s, i) for s in group]
        return out

    def close(self) -> None:
        """Stop every worker by PID and remove the weights file."""
        for conn in self._conns:
            try:
                conn.send(("stop",))
            except OSError:
                pass
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []
        if self._weights_dir:
            shutil.rmtree(self._weights_dir, ignore_errors=True)
            self._weights_dir = None


def _worker_sampling(sampling: Sampling, worker: int) -> Sampling:
    from dataclasses import replace

    return replace(sampling, seed=(sampling.seed + worker * WORKER_SEED_STRIDE) % 2**63)


def _renumbered(sample: Sample, request_index: int) -> Sample:
    sample.request_index = request_index
    return sample


def serve(conn: Connection, threads: int) -> None:
    """A worker's loop: load a model folder, load pushed weights, generate; answers ("ok"|"error", value)."""
    import traceback

    import torch

    torch.set_num_threads(threads)
    engine: Any = None
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the parent went away
            return
        op = message[0]
        try:
            if op == "stop":
                return
            if op == "load":
                from generation.hf import HFEngine

                _, folder, dtype, batch_size, draw = message
                engine = HFEngine(folder, dtype=dtype, batch_size=batch_size, device="cpu", draw=draw)
                conn.send(("ok", None))
            elif op == "stop_ids":
                conn.send(("ok", engine.stop_ids))
            elif op == "weights":
                from safetensors.torch import load_model

                load_model(engine.model, message[1])
                conn.send(("ok", None))
            elif op == "generate":
                _, requests, sampling, samples = message
                conn.send(("ok", engine.generate(requests, sampling, samples)))
            else:
                conn.send(("error", f"unknown message {op!r}"))
        except Exception:
            conn.send(("error", traceback.format_exc()))


if __name__ == "__main__":
    serve(Connection(int(sys.argv[1])), int(sys.argv[2]))
