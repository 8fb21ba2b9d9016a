"""Dagster wiring: the recipe becomes software-defined assets; no algorithms live here.

Graph (asset key prefixes are UI groups):
  sources/file_*         observable raw files, versioned by content hash
  sources/raw_*          canonical rows + quarantine             (curation.sources)
  benchmarks/bench_*     benchmark text / held-out eval sets     (curation.sources)
  curated/clean_*        decontaminated + deduplicated sources   (curation.decontam, .dedup)
                         a source with `shards: N`: N shard steps + a merge step, same rows (assets.shards)
  generations/*          teacher samples filtered by a verifier: SFT rows, pass-rate-filtered
                         RL prompts, SWE patches (generation.runner, .filters)
  corpora/*_data         SFT stage blends, reward-model pairs    (curation.blends)
  corpora/*_prompts      RL prompt sets, disjoint from SFT and earlier stages (curation.prompts)
  checkpoints/*          base_model → sft stages → reward_model → RL stages  (trainer, rewards)
  evals/eval_*           every checkpoint on every domain; evals/forgetting_matrix

Each asset calls one library function, reads its inputs and writes its output through the store
resource (assets.store: `$CASCADE_HOME/<data|checkpoints|evals>/<asset>/<version>/`), and reports
`path`, `data_version`, counts and lineage as metadata. Data versions are content hashes
(datasets) or input hashes (checkpoints), so staleness follows content, not runs.

Modules:
  store.py        `CascadeStore`, the Dagster resource every body reads inputs from and writes outputs through
  sources.py      source and benchmark assets: observed raw files, canonical rows with quarantine
  shards.py       sharded sources as steps, and the executor of the cascade job
  corpora.py      curated tables, SFT blends, reward-model pairs and RL prompt sets
  generations.py  generation assets: a model's responses to a source's rows, made and filtered here
  checkpoints.py  checkpoint assets: base model → SFT stages → reward model → RL stages
  evals.py        eval assets, the forgetting matrix with the cascade report, the gate checks
  eval_versions.py  an eval's per-domain code and data versions; unchanged domains' cells reused
  checks.py       data-quality checks on every curated table and corpus (blocking)
  common.py       asset keys, reading and verifying an output's metadata, library results as metadata
  publish.py      outputs written under a temporary name and renamed when complete
  plots.py        small matplotlib images in asset metadata (reward curves, the forgetting matrix)
"""


import dagster as dg

from assets.checkpoints import build_checkpoint_assets
from assets.checks import build_data_checks
from assets.common import WorkTimer
from assets.corpora import build_corpus_assets
from assets.evals import build_eval_assets
from assets.generations import build_generation_assets
from assets.shards import executor_for
from assets.sources import build_source_assets
from assets.store import STORE, CascadeStore
from spec.recipe import Recipe
from spec.storage import use_storage

MAIN_JOB, OBSERVE_JOB = "cascade", "observe_sources"


def build_definitions(recipe: Recipe, timer: WorkTimer | None = None) -> dg.Definitions:
    """All assets, checks and jobs of a recipe, and the store resource they read and write through
    (its home `$CASCADE_HOME` of the process that runs each step)."""
    timer = timer or WorkTimer()
    use_storage(recipe.storage)  # the caches' location in this process: the recipe's `storage:` (spec.storage)
    source_defs = build_source_assets(recipe, timer)
    corpus_defs = build_corpus_assets(recipe, timer) + build_generation_assets(recipe, timer)
    ckpt_defs = build_checkpoint_assets(recipe, timer)
    eval_defs, eval_checks = build_eval_assets(recipe, timer)
    observables = [d for d in source_defs if isinstance(d, dg.SourceAsset) or getattr(d, "is_observable", False)]
    jobs = [
        dg.define_asset_job(MAIN_JOB, selection=dg.AssetSelection.all(), description=f"Materialize recipe {recipe.name!r}."),
        dg.define_asset_job(OBSERVE_JOB, selection=dg.AssetSelection.assets(*[o.key for o in observables]),
                            description="Re-hash the raw source files (a swapped file makes its downstream stale)."),
    ]
    observe_schedule = dg.ScheduleDefinition(name="observe_sources_hourly", job_name=OBSERVE_JOB, cron_schedule="0 * * * *")
    return dg.Definitions(
        assets=[*source_defs, *corpus_defs, *ckpt_defs, *eval_defs],
        asset_checks=[*build_data_checks(recipe, timer), *eval_checks],
        jobs=jobs,
        schedules=[observe_schedule],
        executor=executor_for(recipe),  # the recipe's `execution:` block (spec.execution)
        resources={STORE: CascadeStore()},
        metadata={"recipe": recipe.name},
    )
