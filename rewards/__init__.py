"""Rewards: one verifier per Cascade RL stage, all behind the TRL-style contract of `base.py`.

What is here and why
--------------------
- `base.py`      the contract: `fn(prompts, completions, **columns) -> list[float | None]`,
                 `.version`, `.score()` with a structured `RewardResult` per completion; never
                 raises (infrastructure failures are flagged `infra_error`, not scored as wrong).
                 `.version` is derived from code: the source digest of the reward's module and
                 the local modules it imports (spec.hashing.source_version) plus a suffix for
                 the options that change scores (`version_options`).
- `registry.py`  one entry per built-in reward (where its class lives, the columns it reads,
                 whether it needs the reward-model checkpoint); `get_reward(name, **options)`
                 imports it only when asked for and validates the options against the reward's
                 option model; `CATALOG` lets the recipe loader run the same check at load;
                 `reward_versions` / `reward_version` feed lineage records;
                 `reward_code_versions` gives source digests at Dagster definition time (no
                 import), so editing a reward's code makes the stages that use it stale.
- `function.py`  your own reward by `module:function` or `path/to/file.py:function`: a plain
                 TRL-style function behind the contract (keyword-only defaults are its options;
                 a raise, a wrong-length result or a non-number is a recorded score with a
                 reason: `reward_error`, `wrong_length`, `bad_score`).
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
- `cli.py`       `cascade verify REWARD --input rows.jsonl --output scored.jsonl` (a verifier
                 or your own reward; prints the version it scored with).
- Others' modules: `ifeval*.py` (IF-RL verifier), `code.py` (sandboxed tests).

Rules: no dagster import here; heavy libraries (torch, transformers, sentence-transformers,
math_verify) are imported inside functions. Every reward's `version` changes when its code
(or an option that changes scores) changes, because the cache and lineage key on it; it is
never written by hand.
"""
