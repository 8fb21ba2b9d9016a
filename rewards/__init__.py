"""Rewards: one verifier per Cascade RL stage, all behind the TRL-style contract of `base.py`.

A reward is `fn(prompts, completions, **columns) -> list[float | None]` with a `.version` and a
`.score()` that gives a structured `RewardResult` (score and reason) per completion. It never
raises: an infrastructure failure is flagged `infra_error` (not scored as wrong), and a user
function's raise, wrong-length result or non-number is a recorded score with a reason. Its
`.version` is derived from code (the source digest of its module and the local modules it
imports, spec.hashing.source_version) plus the options that change scores: the reward cache and
the lineage records key on it, so it is never written by hand and editing a verifier makes the
stages that use it stale.

Modules:
  base.py           the contract: `Reward`, `RewardResult`, versions derived from code
  function.py       your own `module:function` or `file.py:function`: a plain function behind the contract
  registry.py       reward names -> classes (imported when asked for), options validated, `CATALOG` for the recipe
  cache.py          the sqlite score cache, keyed by completion, reward name + version and reference
  math.py           Math RL: the last `\\boxed{}` after `</think>`, symbolic equality (math-verify, killable workers)
  ifeval.py         IF-RL: IFEval's rule-based verifier, and `ifeval_rm`, its blend with the reward model
  ifeval_checks.py  the 25 IFEval instruction checks, with IFEval's instruction ids and kwarg names
  ifeval_text.py    text measurements for those checks: sentences, words, word tokens, language
  code.py           Code RL: 1 only when the extracted program passes every test in the sandbox
  code_judge.py     assert-kind tests judged in a second sandbox, out of the candidate's reach
  code_names.py     which names the asserts resolve and who supplies each: the judge, the row or the candidate
  code_wire.py      the plain data that crosses between the candidate's process and the judge's
  fences.py         fenced code blocks of a completion, found in linear time
  swe.py            SWE RL, execution-free: -1 unparsable, 0 no-op, 1 equal, else a similarity
  reward_model.py   RLHF: the Bradley-Terry reward model (train, save, score) and `RMReward`
  multi_domain.py   Cascade 2 multi-domain rewards: multiple-choice QA, structured output, tool calls
  cli.py            `cascade verify REWARD --input rows.jsonl --output scored.jsonl`

No dagster import here; heavy libraries (torch, transformers, sentence-transformers,
math_verify) are imported inside functions.
"""
