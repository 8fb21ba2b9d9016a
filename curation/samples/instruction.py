"""Instruction-following sample data: IFEval-style prompts (real IFEval instruction ids and
kwarg names) with responses built to satisfy every instruction. Topics are partitioned
between eval / RL / SFT (`slot_key`), and instruction phrases are short, so held-out
prompts share no 9-gram with training prompts. See `curation.samples` for the design."""

from __future__ import annotations

import json
import random
import re
from typing import Any

from curation.samples.common import EVAL_SLOTS, RL_SLOTS, SFT_SLOTS, draw, make_rng

TOPICS = [
    "city gardens", "rainy days", "learning a new language", "public libraries", "night trains", "morning walks",
    "board games", "home baking", "bicycle repair", "bird watching", "houseplants", "camping trips",
    "street food", "old maps", "local museums", "jazz music", "chess clubs", "pottery classes", "tea ceremonies",
    "winter swimming", "community radio", "kite flying", "stargazing", "recycling at home", "farmers markets",
    "handwritten letters", "puzzle books", "mountain huts", "river cruises", "beekeeping", "urban sketching",
    "vintage cameras", "school choirs", "science fairs", "forest bathing", "marathon training", "paper folding",
    "sourdough bread", "lighthouses", "tide pools", "snow days", "picnics", "road trips", "bookbinding",
    "open mic nights", "family recipes", "language exchanges", "knitting circles", "wild swimming", "rock climbing",
    "spring cleaning", "window boxes", "train stations", "second hand shops", "cloud watching", "quiet mornings",
    "museum cafes", "night markets", "tiny houses", "compost heaps", "ferry rides", "lantern festivals",
    "bike lanes", "paper journals", "garden ponds", "hill walking", "folk dancing", "board game cafes",
    "sunrise hikes", "model trains", "bread ovens", "harbor towns", "book clubs", "orchard visits",
    "desert nights", "canal boats", "ice skating", "flea markets", "sand castles", "village fairs",
]
OPENERS = ["Write about {t}.", "Describe {t}.", "Tell me about {t}.", "A short note on {t}, please.",
           "Share thoughts on {t}.", "Say something nice about {t}."]
SENTENCES = [
    "{T} can make an ordinary week feel brighter.", "Many people discover {t} by accident.",
    "The best part of {t} is how simple it is.", "A little planning makes {t} much easier.",
    "Friends often enjoy {t} together.", "{T} can teach patience in small steps.",
    "It costs very little to try {t}.", "Children and adults can both enjoy {t}.",
    "Over time {t} can become a healthy habit.", "Some people keep a journal about {t}.",
    "Start small and let {t} grow with you.", "There is always more to learn about {t}.",
]
KEYWORDS = ["sunlight", "patience", "curiosity", "rhythm", "harmony", "balance", "kindness", "wonder",
            "freedom", "comfort", "energy", "focus"]
FORBIDDEN = ["very", "really", "amazing", "stuff", "basically", "literally", "awesome", "thing", "nice", "great"]
END_PHRASES = ["Cheers!", "Talk soon.", "Stay curious!", "Any questions?", "Happy reading!", "Good luck!"]
PLACEHOLDERS = ["[name]", "[address]", "[date]"]

# id -> prompt phrase variants ({n}, {w1}, {w2}, {phrase}, {marker}, {rel} are filled in).
PHRASES: dict[str, list[str]] = {
    # At most 4 fixed words each: two adjacent phrases never make a shared 9-gram.
    "punctuation:no_comma": ["Use no commas.", "Avoid commas."],
    "change_case:english_lowercase": ["All lowercase, please.", "Lowercase letters only."],
    "change_case:english_capital": ["ALL CAPS, please.", "Uppercase letters only."],
    "startend:quotation": ["Quote the whole reply.", "Wrap it in quotes."],
    "detectable_format:title": ["Add a <<title>>.", "Include a <<title>>."],
    "length_constraints:number_words": ["Use {rel} {n} words.", "Word count: {rel} {n}."],
    "length_constraints:number_sentences": ["Write {rel} {n} sentences.", "Sentences: {rel} {n}."],
    "detectable_format:number_bullet_lists": ["Use exactly {n} bullets.", "Give {n} * bullet points."],
    "length_constraints:number_paragraphs": ["Write {n} paragraphs split by ***.", "{n} paragraphs, divided by ***."],
    "detectable_format:number_highlighted_sections": ["Highlight {n} parts like *this*.", "Mark {n} *sections*."],
    "keywords:existence": ["Include {w1} and {w2}.", "Mention {w1} and {w2}."],
    "keywords:forbidden_words": ["Never say {w1} or {w2}.", "Avoid {w1} and {w2}."],
    "startend:end_checker": ["End with '{phrase}'", "Finish with '{phrase}'"],
    "detectable_content:postscript": ["Add {marker}", "Close with {marker}"],
    "detectable_content:number_placeholders": ["Use {n} [placeholders].", "Leave {n} [blanks]."],
}
FORMATS = ("detectable_format:number_bullet_lists", "length_constraints:number_paragraphs",
           "detectable_format:number_highlighted_sections")
CASES = ("change_case:english_lowercase", "change_case:english_capital")
WORD_RE = re.compile(r"\w+")


def _choose_ids(rng: random.Random, with_responses: bool) -> list[str]:
    pool = [i for i in PHRASES if i not in FORMATS + CASES]
    ids = rng.sample(pool, rng.choice([1, 1, 2]))
    if rng.random() < 0.4:
        fmt = rng.choice(FORMATS)
        # A quote before the first bullet hides it from the bullet count.
        if not (fmt == FORMATS[0] and "startend:quotation" in ids):
            ids.append(fmt)
    if rng.random() < 0.3:
        # IFEval's language check (langdetect) often calls all-caps English German, so
        # teacher responses never use english_capital; prompt-only sets may.
        ids.append(rng.choice(CASES if not with_responses else CASES[:1]))
    return ids[:3]


def _content(rng: random.Random, topic: str, n: int) -> list[str]:
    return [s.format(t=topic, T=topic[0].upper() + topic[1:]) for s in rng.sample(SENTENCES, n)]


def _respond(rng: random.Random, topic: str, ids: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """Build a response satisfying `ids`; return it with the kwargs (measured from it)."""
    kw: dict[str, dict[str, Any]] = {i: {} for i in ids}
    n = rng.randint(2, 4)
    body = _content(rng, topic, n + (2 if "length_constraints:number_paragraphs" in ids else 0))
    if "keywords:existence" in ids:
        w1, w2 = rng.sample(KEYWORDS, 2)
        kw["keywords:existence"] = {"keywords": [w1, w2]}
        body.append(f"Two words come to mind: {w1} and {w2}.")
    if "detectable_content:number_placeholders" in ids:
        k = rng.randint(1, 3)
        kw["detectable_content:number_placeholders"] = {"num_placeholders": k}
        body.append("Write to me with " + " and ".join(PLACEHOLDERS[:k]) + ".")
    if "detectable_format:number_bullet_lists" in ids:
        kw["detectable_format:number_bullet_lists"] = {"num_bullets": len(body)}
        text = "\n".join(f"* {s}" for s in body)
    elif "length_constraints:number_paragraphs" in ids:
        paras = [" ".join(body[i::n]) for i in range(n)]
        kw["length_constraints:number_paragraphs"] = {"num_paragraphs": n}
        text = "\n\n***\n\n".join(paras)
    elif "detectable_format:number_highlighted_sections" in ids:
        marked = rng.sample(range(len(body)), min(n, len(body)))
        kw["detectable_format:number_highlighted_sections"] = {"num_highlights": len(marked)}
        text = " ".join(f"*{s}*" if i in marked else s for i, s in enumerate(body))
    else:
        text = " ".join(body)
    if "detectable_format:title" in ids:
        text = f"<<{topic.title()}>>\n\n{text}"
    if "detectable_content:postscript" in ids:
        marker = rng.choice(["P.S.", "P.P.S"])
        kw["detectable_content:postscript"] = {"postscript_marker": marker}
        text += f"\n\n{marker} I hope you try {topic} soon."
    if "startend:end_checker" in ids:
        phrase = rng.choice(END_PHRASES)
        kw["startend:end_checker"] = {"end_phrase": phrase}
        text += f" {phrase}"
    if "change_case:english_lowercase" in ids:
        text = text.lower()
    if "change_case:english_capital" in ids:
        text = text.upper()
    if "startend:quotation" in ids:
        text = f'"{text}"'
    if "keywords:forbidden_words" in ids:
        free = [w for w in FORBIDDEN if not re.search(rf"\b{w}\b", text, re.IGNORECASE)]
        kw["keywords:forbidden_words"] = {"forbidden_words": rng.sample(free, 2)}
    words = len(WORD_RE.findall(text))
    if "length_constraints:number_words" in ids:
        relation = rng.choice(["at least", "less than"])
        bound = max(1, words - rng.randint(0, 5)) if relation == "at least" else words + rng.randint(3, 15)
        kw["length_constraints:number_words"] = {"num_words": bound, "relation": relation}
    if "length_constraints:number_sentences" in ids:
        relation = rng.choice(["at least", "less than"])
        bound = max(1, len(body) - 2) if relation == "at least" else len(body) + 5
        kw["length_constraints:number_sentences"] = {"num_sentences": bound, "relation": relation}
    return text, [kw[i] for i in ids]


def _phrase(rng: random.Random, iid: str, kwargs: dict[str, Any]) -> str:
    fill = {"n": next((v for k, v in kwargs.items() if k.startswith("num")), ""), "rel": kwargs.get("relation", ""),
            "phrase": kwargs.get("end_phrase", ""), "marker": kwargs.get("postscript_marker", "")}
    words = kwargs.get("keywords") or kwargs.get("forbidden_words") or ["", ""]
    return rng.choice(PHRASES[iid]).format(w1=words[0], w2=words[1], **fill)


def if_item(rng: random.Random, special: bool = True, with_responses: bool = True) -> dict[str, Any]:
    """One IFEval-style row: prompt, instruction ids, kwargs (JSON) and responses."""
    topic = rng.choice(TOPICS)
    request = rng.choice(OPENERS).format(t=topic)
    if special and rng.random() < 0.12:
        if rng.random() < 0.5:
            ids, kwargs = ["detectable_format:constrained_response"], [{}]
            answer = rng.choice(["yes", "no", "maybe"])
            prompt = f"Is {topic} worth a try? Reply with My answer is yes. or My answer is no. or My answer is maybe."
            text = f"My answer is {answer}."
        else:
            ids, kwargs = ["combination:repeat_prompt"], [{"prompt_to_repeat": request}]
            prompt = f"Repeat this request first, then answer: {request}"
            text = request + " " + " ".join(_content(rng, topic, 2))
    else:
        ids = _choose_ids(rng, with_responses)
        text, kwargs = _respond(rng, topic, ids)
        phrases = [_phrase(rng, i, k) for i, k in zip(ids, kwargs)]
        # The request sits between the phrases so fixed phrases never run together.
        prompt = " ".join([phrases[0], request] + phrases[1:])
    think = f"<think>\nThe reply is about {topic} and must follow {len(ids)} rule(s). I will check each one.\n</think>\n"
    return {"key": [topic, ids, kwargs], "slot_key": ["if-topic", topic], "prompt": prompt,
            "instruction_id_list": ids, "kwargs": json.dumps(kwargs), "think_response": think + text,
            "no_think_response": text}


IF_FIELDS = ("prompt", "instruction_id_list", "kwargs", "think_response", "no_think_response")


def _rows(name: str, seed: int, n: int, slots: tuple[int, ...], fields: tuple[str, ...], special: bool = True) -> list:
    rng = make_rng(name, seed)
    with_responses = "no_think_response" in fields
    return [{f: it[f] for f in fields} for it in draw(rng, n, lambda r: if_item(r, special, with_responses), slots)]


def instruction_sft(seed: int) -> list:
    return _rows("instruction_sft", seed, 200, SFT_SLOTS, IF_FIELDS)


def instruction_rl(seed: int) -> list:
    return _rows("instruction_rl", seed, 150, RL_SLOTS, IF_FIELDS[:3])


def instruction_eval(seed: int) -> list:
    return _rows("instruction_eval", seed, 128, EVAL_SLOTS, IF_FIELDS[:3], special=False)


GENERATORS = {"instruction_sft": instruction_sft, "instruction_rl": instruction_rl, "instruction_eval": instruction_eval}
