"""Names vulture cannot see used, because something outside Python's name lookup uses them.

Read by tests/architecture/test_dead_code.py as a vulture whitelist (never imported or run): a
bare name here counts as a use. Keep each entry true and commented; dead code goes, it is not
listed here. Two kinds of dynamic use need no entry, because the test handles them itself:
functions registered by a decorator (pydantic validators, `@_register` in
rewards/ifeval_checks.py, `atexit.register`; the test's IGNORE_DECORATORS) and objects named by
`"module:attr"` strings in the registries (the test reads those strings from the source).
"""

# Extension points for a team's own code, documented in docs/architecture.md#adding-things-one-place-each:
# called from outside the packages, never from inside them.
register_reader  # curation/sources.py: a new source file type
register_format  # curation/formats.py: a new row layout
register_backend  # trainer/stage.py: a new training backend

# Named as a string in the Dagster instance config (dagster_project/commands.py writes
# `{"module": "dagster_project.pg_storage", "class": "PostgresStorage"}`); Dagster's
# ConfigurableClass machinery then calls `from_config_value`.
PostgresStorage
from_config_value

# Options dataclass fields read through dataclasses.asdict() and passed to vllm.LLM as keywords
# (generation/vllm_engine.py VLLMOptions).
max_num_seqs
enable_prefix_caching
cpu_kvcache_space_gib
gpu_memory_utilization

# Attributes set on third-party objects that the library reads: the Hugging Face tokenizer's
# truncation side and length (rewards/reward_model.py), the `tokenizers` pipeline parts and the
# chat template (trainer/models.py).
truncation_side
model_max_length
pre_tokenizer
decoder
chat_template

# Cache-layer methods transformers' Cache calls on every layer (beam search reorders rows,
# assisted decoding crops tokens); generation/kv_cache.py's preallocated layer overrides them so
# its buffers stay consistent if a caller ever does either.
reorder_cache
crop
