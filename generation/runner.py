"""One generation run, as the generation assets and `cascade generate` both do it: the engine
built on a resolved model, rows sampled through the generation cache (generation.pipeline's
`generate_rows`), the cache and the engine closed once the record stream has been read.

The two callers differ only in where the rows and the model come from and in what they do with
the records (generation.filters). A `GenerationJob` is what they agree on: engine, model and
its content version, modes, samples, sampling. `GenerationJob.from_spec` reads a recipe's
`generations:` entry (spec.generation); the CLI builds one from its flags.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa

from generation.cache import GenerationCache
from generation.engine import Engine, Sampling, build_engine
from generation.pipeline import GenerationStats, GenRecord, Row, generate_rows
from generation.progress import Progress
from spec.generation import GenerationSpec


def served_version(name: str) -> str:
    """The content version of a model behind an endpoint: its served name (remote weights cannot
    be hashed), so the generation cache keys on the name."""
    return f"served:{name}"


@dataclass(frozen=True)
class GenerationJob:
    """What one generation run samples, and from which model on which engine."""

    engine: str
    """Engine name (generation.engine.ENGINES)."""
    model: str
    """What the engine loads: a model folder (hf, vllm) or the served model's name (openai)."""
    model_version: str
    """The model's content version (part of every cache key): a checkpoint's data version, a
    folder's digest (trainer.models.model_folder) or `served_version`."""
    modes: Sequence[str] | None
    """Reasoning modes prompted; None: each row's own `mode` column."""
    samples: int
    """Samples per row and mode."""
    sampling: Sampling
    """Sampling settings (part of every cache key)."""
    batch_rows: int = 64
    """Input rows per engine call and per cache commit."""
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments of the engine's constructor (endpoints, dtype, batch size, ...)."""

    @classmethod
    def from_spec(cls, gen: GenerationSpec, model: str, model_version: str) -> "GenerationJob":
        """The run of a `generations:` entry whose model resolved to `model` (a folder)."""
        options = dict(gen.engine.options)
        if gen.engine.name == "openai":
            urls = {"base_urls": gen.engine.base_urls} if gen.engine.base_urls else {"base_url": gen.engine.base_url}
            options |= {"api_key_env": gen.engine.api_key_env, **urls}
            model = str(gen.model)  # an endpoint serves it under the recipe's name, wherever it was resolved
        return cls(gen.engine.name, model, model_version, tuple(gen.modes), gen.samples,
                   Sampling(**gen.sampling.model_dump()), gen.batch_rows, options)


@dataclass
class GenerationRun:
    """A run in progress: read `records` while the run's context is open."""

    records: Iterator[GenRecord]
    """One record per (row, mode, sample), in input order (generation.pipeline.generate_rows)."""
    engine: Engine
    """The open engine (its name and version identify what generated)."""
    stats: GenerationStats
    """Counts, filled in as `records` is read."""


@contextmanager
def run_generation(job: GenerationJob, rows: pa.Table | Iterable[Row], cache: str | Path | None = None, *,
                   progress: Progress | None = None, total: int | None = None,
                   stats: GenerationStats | None = None) -> Iterator[GenerationRun]:
    """Open the generation cache at `cache` (None: the default location) and the job's engine,
    and yield the run whose records stream `rows`' samples, cached ones from the cache and only
    the missing ones from the engine. Both are closed when the context exits."""
    stats = stats if stats is not None else GenerationStats()
    with GenerationCache(cache) as store:
        engine = build_engine(job.engine, job.model, **job.engine_options)
        try:
            records = generate_rows(engine, job.model_version, rows, job.modes, job.samples, job.sampling, store,
                                    progress=progress, batch_size=job.batch_rows, total=total, stats=stats)
            yield GenerationRun(records, engine, stats)
        finally:
            engine.close()


__all__ = ["GenerationJob", "GenerationRun", "run_generation", "served_version"]
