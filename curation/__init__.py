"""Curation: a polars/pyarrow data library that turns raw sources into curated, versioned corpora.

No Dagster here (assets/ only wires these functions and records what happened); heavy
libraries (datasets, datasketch) are imported inside the functions that need them. Nothing is
dropped silently: every invalid or removed row is counted with a reason, and
rows_in == rows_out + sum(dropped) is checked wherever rows drop. The flow, one module per step:
sources -> decontam -> dedup -> blends (SFT corpora) or prompts (RL prompt sets) -> versioning.

Modules:
  sources.py           raw jsonl / parquet / HF files -> a domain's canonical rows + a quarantine (`READERS`)
  formats.py           row layouts (openai, sharegpt, preference, Nemotron, ...) -> canonical fields (`FORMATS`)
  formats_chat.py      chat turns in those layouts -> canonical conversation fields
  rows.py              `canonical_row`: the value rules every record passes, and the stable `row_id`
  schemas.py           the canonical row schema of each domain
  text.py              the one text normalisation of the package and its stable word / n-gram hashes
  word_spans.py        what the two tokenisers share: the input column, the word span layout, fmix64
  decontam.py          streaming n-gram decontamination against benchmark text (and its reference oracle)
  decontam_index.py    the benchmark side: every n-gram hash, with the benchmark and text behind it
  decontam_text.py     words and n-gram hashes for decontamination, exact and vectorised
  decontam_unicode.py  non-ASCII text for decontamination: exact normalisation, a cheap ASCII-word check
  dedup_params.py      what dedup compares: the whole example by default, per-domain fields from the recipe
  minhash.py           shingle sets, MinHash signatures (bit-equal to datasketch's), exact Jaccard
  dedup_stages.py      the one dedup algorithm as bounded-memory stages: keys, buckets, edges, clusters
  dedup.py             those stages in one process, within and across tables
  shards.py            sharded curation: the per-shard, per-partition and streamed assembly steps
  swe.py               SWE instances: patch filtering, benchmark-repo exclusion, dedup, the SFT/RL split
  patches.py           unified-diff patches: parsing, normalisation, lexical similarity
  chat.py              ChatML rendering shared by curation, rewards and the trainer (/think, /no_think)
  blends.py            SFT stage blends: sources -> one formatted, upsampled, length-capped corpus
  prompts.py           RL prompt sets carrying their verifiers' columns, disjoint from SFT and earlier stages
  accounting.py        `RowAccount`: rows in, drops by reason, the identity that ties them to rows out
  reasons.py           every quarantine and drop reason, one line each (`REASONS`; docs/reasons.md is generated from it)
  content_hash.py      a dataset's version: blake2b over canonical column bytes, also streamed from parquet
  versioning.py        `<root>/<asset>/<data_version>/data.parquet` + `lineage.json`, written once, atomically
  cli.py               `cascade decontam`: the streaming decontamination as a command
  samples/             built-in offline sample data, one generator per recipe `generate:` name
"""
