"""RLHF reward: a Bradley–Terry scalar reward model (train, save, score) and `RMReward`.

Training: `AutoModelForSequenceClassification(num_labels=1)` on (prompt, chosen, rejected)
rows with loss −log σ(r_chosen − r_rejected); saved in Hugging Face sequence-classification
format with its tokenizer, so any HF tooling can load it.

Pooling, done here rather than by HF's head: HF finds "the last token" as the last token
that is not `pad_token_id`. When pad == EOS (the usual fallback for tokenizers without a
pad token) an EOS inside the text is mistaken for padding. We pool at the last position of
the *attention mask* instead (right for left or right padding and for pad == EOS) and pass
position ids from the mask, so a left-padded row scores as it would unpadded.

A NaN/inf loss or gradient norm stops training before that step's update with
`spec.nonfinite.NonFiniteLossError` (algorithm `reward_model`, the output folder, the step), as in the
policy trainers; nothing is written, and the trainer keeps no checkpoints, so a rerun starts over.

Texts are ChatML (`curation.chat.render_messages`) of the prompt and the response's final
text (after `</think>`): the paper scores the answer, not the reasoning. Truncation keeps
the end of a long text, where the pooled token is.

`RMReward`'s guarantees (a policy optimises whatever the reward model pays for):
- The reasoning is never scored. A think block left open (`<think>` with no `</think>`
  after it) has no final text: the scorer sees an empty response, so praise written into
  unfinished reasoning earns nothing.
- Language mixing gets the batch minimum − 10 (`language_mixing`). Scripts are counted on
  what a reader sees: NFKC first (fullwidth `ｔｈｅ` is Latin), invisible format characters
  (zero-width spaces, joiners) and combining marks never split a word, so they cannot
  inflate one script's share; inside code and `$math$` spans only Latin is ignored
  (identifiers, variables), so wrapping Chinese in backticks does not hide it.
- Echoing the prompt gets the batch minimum − 10 too (`repeats_prompt`): a response
  whose words are the last user turn's words, once or repeated, and nothing else (prompts
  of at least 5 words; a short "hi" may be echoed). Reward models are known to rate such
  echoes unpredictably; anything more than the echo is left to the reward model.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from pathlib import Path
from typing import Any, Iterable, Sequence

from curation.chat import MODE_SUFFIX, THINK_CLOSE, THINK_OPEN, final_text
from rewards.base import Reward, RewardResult
from spec.nonfinite import check_finite
from spec.train import RMSettings


class RMConfig(RMSettings):
    """Bradley–Terry reward-model training settings (the recipe's `reward_model.train`) plus the seed."""

    seed: int = 0
    """Seed for head initialisation and shuffling."""


def answer_text(completion: str) -> str:
    """The scored text: after the last `</think>`; empty when a think block is left open."""
    return "" if completion.rfind(THINK_OPEN) > completion.rfind(THINK_CLOSE) else final_text(completion)


def render(prompt: Any, response: str) -> str:
    """ChatML text the reward model reads: the user turn(s) and the response's final text.
    The response's own chat control tokens are dropped: written by the policy, they would end
    its turn and forge new ones (a fake user turn asking for praise) in what the model reads."""
    from curation.chat import render_messages

    content = _CHAT_TOKENS_RE.sub("", answer_text(response))
    return render_messages([*_messages(prompt), {"role": "assistant", "content": content}])


_CHAT_TOKENS_RE = re.compile(r"<\|(?:im_start|im_end|endoftext)\|>")


def _messages(prompt: Any) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        try:  # a canonical prompt may be a JSON conversation
            decoded = json.loads(prompt)
            messages = decoded if isinstance(decoded, list) else [{"role": "user", "content": prompt}]
        except ValueError:
            messages = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, list):
        messages = list(prompt)
    else:
        messages = [{"role": "user", "content": "" if prompt is None else str(prompt)}]
    return messages


_WORDS_RE = re.compile(r"[^\W_]+")


def repeats_prompt(prompt: Any, response: str, min_words: int = 5) -> bool:
    """Whether `response`'s words are the last user turn's words, once or more, and nothing
    else (case, punctuation and spacing aside); prompts under `min_words` words never match.

    >>> q = "Name three rivers of Europe, please."
    >>> repeats_prompt(q, "name three rivers of europe please"), repeats_prompt(q, "The Danube, Rhine and Loire.")
    (True, False)
    """
    users = [m for m in _messages(prompt) if isinstance(m, dict) and m.get("role", "user") == "user"]
    content = str(users[-1].get("content", "")) if users else ""
    for suffix in MODE_SUFFIX.values():
        content = content.removesuffix(suffix)
    asked = _WORDS_RE.findall(unicodedata.normalize("NFKC", content).casefold())
    if len(asked) < min_words:
        return False
    visible = "".join(ch for ch in response if unicodedata.category(ch) != "Cf")  # no zero-width dodge
    said = _WORDS_RE.findall(unicodedata.normalize("NFKC", visible).casefold())
    return bool(said) and len(said) % len(asked) == 0 and said == asked * (len(said) // len(asked))


def _load_tokenizer(path: str | Path, max_length: int):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:  # pooling does not rely on pad ids, so EOS is a safe pad
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.truncation_side = "left"
    tokenizer.model_max_length = max_length
    return tokenizer


def pooled_scores(model: Any, input_ids: Any, attention_mask: Any) -> Any:
    """Scalar per row from the score head at the last attended position (any padding side)."""
    import torch

    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).last_hidden_state
    head = getattr(model, "score", None) or model.classifier
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    last = (positions * attention_mask.long()).argmax(-1)
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    return head(hidden[rows, last]).squeeze(-1).float()


def _preference_rows(table: Any) -> list[dict[str, Any]]:
    """Rows of a pyarrow/polars table, a parquet/jsonl path, or an iterable of dicts."""
    if isinstance(table, (str, Path)):
        path = Path(table)
        if path.suffix == ".jsonl":
            return [json.loads(line) for line in path.open() if line.strip()]
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    if hasattr(table, "to_pylist"):
        return table.to_pylist()
    if hasattr(table, "to_dicts"):
        return table.to_dicts()
    return list(table)


def train_reward_model(base_model_dir: str | Path, preference_table: Any, output_dir: str | Path,
                       config: RMConfig | None = None) -> Path:
    """Train a Bradley–Terry RM on (prompt, chosen, rejected) rows; returns `output_dir`.

    Writes the model (HF sequence-classification, num_labels=1), tokenizer and
    `rm_training.json` (config, steps, per-step losses, final train accuracy).
    """
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForSequenceClassification

    config = config or RMConfig()
    rows = [r for r in _preference_rows(preference_table) if r.get("chosen") and r.get("rejected")]
    if not rows:
        raise ValueError("preference table has no (prompt, chosen, rejected) rows")
    torch.manual_seed(config.seed)
    tokenizer = _load_tokenizer(base_model_dir, config.max_length)
    model = AutoModelForSequenceClassification.from_pretrained(base_model_dir, num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, betas=(0.9, 0.95),
                                  weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(config.seed)
    losses: list[float] = []
    correct = seen = 0
    for _ in range(config.epochs):
        order = torch.randperm(len(rows), generator=generator).tolist()
        for start in range(0, len(order), config.batch_size):
            batch = [rows[i] for i in order[start:start + config.batch_size]]
            texts = [render(r.get("prompt"), r["chosen"]) for r in batch] + [render(r.get("prompt"), r["rejected"]) for r in batch]
            enc = tokenizer(texts, return_tensors="pt", padding=True, truncation=True)
            scores = pooled_scores(model, enc["input_ids"], enc["attention_mask"])
            margin = scores[: len(batch)] - scores[len(batch):]
            loss = -F.logsigmoid(margin).mean()
            where = {"algorithm": "reward_model", "stage": str(output_dir)}
            check_finite(loss, len(losses), **where)
            optimiser.zero_grad()
            loss.backward()
            norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
            check_finite(norm, len(losses), what="gradient norm", **where)
            optimiser.step()
            losses.append(loss.item())
            correct, seen = correct + int((margin > 0).sum()), seen + len(batch)
            if config.max_steps is not None and len(losses) >= config.max_steps:
                break
        if config.max_steps is not None and len(losses) >= config.max_steps:
            break
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    (output_dir / "rm_training.json").write_text(json.dumps(
        {"config": config.model_dump(mode="json"), "pairs": len(rows), "steps": len(losses), "losses": losses,
         "train_accuracy": correct / max(1, seen)}, indent=1))
    return output_dir


class RewardModelScorer:
    """Scores (prompt, response) pairs with a saved reward model: `scorer(prompts, responses)`."""

    def __init__(self, path: str | Path, batch_size: int = 32, max_length: int = 1024, padding_side: str = "right"):
        import torch
        from transformers import AutoModelForSequenceClassification

        self.path = Path(path)
        self.batch_size = batch_size
        self.tokenizer = _load_tokenizer(self.path, max_length)
        self.tokenizer.padding_side = padding_side
        self.model = AutoModelForSequenceClassification.from_pretrained(self.path, dtype=torch.float32).eval()

    def score_texts(self, texts: Sequence[str]) -> list[float]:
        """Scores of already-rendered texts, in their order. Batches hold texts of similar length
        (tokenized once, sorted): padding is computed for nothing, and with right padding under a
        causal mask a row's score does not depend on its batch (fp32: equal to ~1e-5)."""
        import torch

        encoded = self.tokenizer(list(texts), truncation=True)["input_ids"]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        out = [0.0] * len(encoded)
        with torch.no_grad():
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                enc = self.tokenizer.pad({"input_ids": [encoded[i] for i in rows]}, return_tensors="pt")
                for i, score in zip(rows, pooled_scores(self.model, enc["input_ids"], enc["attention_mask"]).tolist()):
                    out[i] = score
        return out

    def __call__(self, prompts: Sequence[Any], responses: Sequence[str]) -> list[float]:
        return self.score_texts([render(p, r) for p, r in zip(prompts, responses)])


# Scripts whose letters count for language mixing. Greek is left out: math uses α, π, Σ.
_SCRIPTS = ("LATIN", "CJK", "HIRAGANA", "KATAKANA", "HANGUL", "CYRILLIC", "ARABIC", "HEBREW", "DEVANAGARI", "THAI")
_SCRIPT_GROUP = {"HIRAGANA": "CJK", "KATAKANA": "CJK", "HANGUL": "CJK"}  # Japanese mixes these with kanji


_SPANS_RE = re.compile(r"```.*?(```|$)|`[^`]*`|\$[^$]*\$", re.DOTALL)


def script_shares(text: str) -> dict[str, float]:
    """Share of each script among the words of `text` (Latin inside code and `$math$` spans
    is not counted: identifiers and variables are no language).

    Units are comparable across scripts: a run of letters of one alphabetic script is one
    word, each CJK character is one (a Chinese character carries about a word). The text is
    NFKC-normalised, and invisible format characters and combining marks continue a run.
    """
    text = unicodedata.normalize("NFKC", text)
    counts: dict[str, int] = {}
    start = 0
    for span in _SPANS_RE.finditer(text):
        _count_scripts(text[start:span.start()], counts)
        _count_scripts(span.group(0), counts, skip="LATIN")
        start = span.end()
    _count_scripts(text[start:], counts)
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()} if total else {}


def _count_scripts(text: str, counts: dict[str, int], skip: str | None = None) -> None:
    previous = None
    for ch in text:
        script = None
        if ch.isalpha():
            name = unicodedata.name(ch, "UNKNOWN").split(" ")[0]
            script = _SCRIPT_GROUP.get(name, name) if name in _SCRIPTS and name != skip else None
        elif (category := unicodedata.category(ch)) == "Cf" or category[0] == "M":
            continue  # zero-width characters and combining marks do not end a word
        if script is not None and (script == "CJK" or script != previous):
            counts[script] = counts.get(script, 0) + 1
        previous = script


def mixes_languages(text: str, min_share: float = 0.1) -> bool:
    """True when two or more scripts each hold at least `min_share` of the words.

    >>> mixes_languages("The capital of China is 北京."), mixes_languages("中国的首都是北京。")
    (True, False)
    >>> mixes_languages("Ответ: $x = 5$, `numpy.sum`"), mixes_languages("So α + β = π.")
    (False, False)
    """
    return sum(share >= min_share for share in script_shares(text).values()) >= 2


class RMReward(Reward):
    """RLHF reward: the reward model's score of the final text (registry name `rm`).

    With `language_penalty` (the paper's default), a completion that mixes scripts gets the
    batch minimum − 10; with `echo_penalty`, so does one that only repeats the prompt. Either
    makes the score depend on the batch (`batch_dependent`).
    """

    name = "rm"

    def __init__(self, model_path: str | Path | None = None, language_penalty: bool = True,
                 min_share: float = 0.1, batch_size: int = 32, scorer: Any = None, echo_penalty: bool = True):
        """`model_path`: saved RM; `scorer`: any `(prompts, responses) -> scores` instead;
        `echo_penalty`: a response that only repeats the prompt gets the floor too."""
        if scorer is None and model_path is None:
            raise ValueError("RMReward needs model_path (a trained reward model) or a scorer")
        self.model_path, self.language_penalty, self.min_share = model_path, language_penalty, min_share
        self.echo_penalty = echo_penalty
        self._scorer, self._batch_size, self._weights = scorer, batch_size, None

    @property
    def batch_dependent(self) -> bool:
        return self.language_penalty or self.echo_penalty

    def version_options(self) -> str:
        """The weights (content hash, read once), the penalties and their threshold change scores."""
        if self._weights is None:
            self._weights = "injected"
            if self.model_path is not None:
                digest = hashlib.blake2b(digest_size=8)
                for f in sorted(Path(self.model_path).glob("*.safetensors")) + [Path(self.model_path) / "config.json"]:
                    digest.update(f.read_bytes())
                self._weights = digest.hexdigest()
        return (self._weights + (f"-lang{self.min_share}" if self.language_penalty else "")
                + ("-echo" if self.echo_penalty else ""))

    def scorer(self) -> Any:
        if self._scorer is None:
            self._scorer = RewardModelScorer(self.model_path, batch_size=self._batch_size)
        return self._scorer

    def _score_batch(self, prompts: list[Any], completions: list[str], columns: dict[str, list]) -> list[RewardResult]:
        if not completions:
            return []
        texts = [answer_text(c) for c in completions]
        scores = [float(s) for s in self.scorer()(prompts, texts)]
        if any(not math.isfinite(s) for s in scores):
            raise FloatingPointError("reward model returned a non-finite score")
        floor = min(scores) - 10.0
        results = []
        for i, (text, s) in enumerate(zip(texts, scores)):
            if self.language_penalty and mixes_languages(text, self.min_share):
                results.append(RewardResult(floor, "language_mixing", detail=f"rm={s:.4f}"))
            elif self.echo_penalty and repeats_prompt(prompts[i] if i < len(prompts) else None, text):
                results.append(RewardResult(floor, "repeats_prompt", detail=f"rm={s:.4f}"))
            else:
                results.append(RewardResult(s, "scored"))
        return results


def score_pairs(scorer: RewardModelScorer, rows: Iterable[dict[str, Any]]) -> float:
    """Fraction of (prompt, chosen, rejected) rows where chosen outscores rejected."""
    rows = list(rows)
    chosen = scorer([r.get("prompt") for r in rows], [r["chosen"] for r in rows])
    rejected = scorer([r.get("prompt") for r in rows], [r["rejected"] for r in rows])
    return sum(c > r for c, r in zip(chosen, rejected)) / max(1, len(rows))
