"""Rewards: one verifier per Cascade RL stage, all behind the TRL-style contract of `base.py`.

What is here and why
--------------------
- `base.py`      the contract: `fn(prompts, completions, **columns) -> list[float | None]`,
                 `.version`, `.score()` with a structured `RewardResult` per completion; never
                 raises (infrastructure failures are flagged `infra_error`, not scored as wrong).
- `registry.py`  one entry per built-in reward (where its class lives, the columns it reads,
                 whether it needs the reward-model checkpoint); `get_reward(name, **options)`
                 imports it only when asked for and validates the options against the reward's
                 option model; `CATALOG` lets the recipe loader run the same check at load;
                 `reward_versions` / `reward_version` feed lineage records.
- `math.py`      Math RL: the last `\\boxed{...}` (or `\\fbox`, `\\boxed x`) after `</think>`,
                 symbolic equivalence via math-verify. math-verify's own timeout uses
                 `signal.alarm`, which only works in the main thread, so every check runs in a
                 small pool of worker processes; a check that outlives our timeout gets its
                 worker killed and replaced, and the completion scores 0 with reason `timeout`.
                 No "last number in the text" fallback: it rewards guessing.
- `swe.py`       SWE RL, execution-free: −1 unparsable patch, 0 no-op, 1 equal to the golden
                 patch after normalisation (curation.patches), otherwise a similarity in [0, 1]
                 from a pluggable scorer: embedding cosine (all-MiniLM-L6-v2, the default),
                 lexical (SWE-RL's difflib ratio) or an LLM judge's P(YES) (the paper's choice).
- `reward_model.py` RLHF: Bradley–Terry scalar reward model (train, save in HF
                 sequence-classification format, score batches) and `RMReward`, with the
                 paper's language-mixing penalty (batch minimum − 10). Scores the text after
                 `</think>`; pooling takes the last non-pad token from the attention mask, so
                 it is right whatever the padding side and whether pad == EOS.
- `cache.py`     sqlite cache keyed by (completion hash, reward name + version, reference
                 hash): audits and reruns do not recompute; a version bump invalidates.
- `cli.py`       `cascade verify REWARD --input rows.jsonl --output scored.jsonl`.
- Others' modules: `ifeval*.py` (IF-RL verifier), `code.py` (sandboxed tests).

Rules: no dagster import here; heavy libraries (torch, transformers, sentence-transformers,
math_verify) are imported inside functions. Every reward's `version` changes when its
behaviour changes, because the cache and lineage key on it.
"""
