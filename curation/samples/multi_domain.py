"""Cascade 2 multi-domain RL prompts: multiple-choice QA, tool calls, structured output.

Offline and deterministic like every sample generator (curation.samples): arithmetic and unit
questions with four lettered options (`mcqa`), requests that one of a few declared tools answers
with exact arguments (`tool_call`: `tools` + `reference_call`), and extraction requests whose
answer is a JSON object under a strict JSON Schema (`structured_output`: `additionalProperties:
false`, typed and required fields). The `*_rl` generators use the RL slots, the `*_eval`
generators (128 held-out rows each) the eval slots and the `*_sft` generators the SFT slots
(curation.samples.common), so no problem is shared. Eval prompts ask the same tasks in other words (the RL templates repeat phrases of 9+
words, which would make every RL row look contaminated by its own eval set under 9-gram
decontamination), and eval weather calls use cities of their own (12 cities x 2 units leave
too few eval-slot keys).

The `*_sft` rows teach each format before RL rewards it (Cascade 2 SFT covers every domain it
later trains): the RL wording with a worked response in exactly the form the verifier accepts
(`Answer: B`; one `<tool_call>` block with typed arguments; one bare JSON object). A 135M model
never produces these formats unprompted within the RL token budget, so without them
multi-domain RL has no reward variance to learn from. SFT domains: `chat` for MCQA and
structured output, `tool` for tool calls (the SFT renderer puts `tools` in the system prompt
as the RL prompt set does).
"""

from __future__ import annotations

import json
import random
from typing import Any

from curation.samples.common import EVAL_SLOTS, RL_SLOTS, SFT_SLOTS, Record, draw, make_rng, public

CITIES = ("Paris", "Lima", "Oslo", "Cairo", "Tokyo", "Quito", "Perth", "Dakar", "Hanoi", "Bern", "Riga", "Accra")
NAMES = ("Alice", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Jun", "Kemal", "Lena")
EVAL_CITIES = ("Lagos", "Minsk", "Sofia", "Doha", "Kyiv", "Lyon", "Porto", "Seoul", "Delhi", "Nairobi", "Havana",
               "Muscat", "Tunis", "Vilnius", "Tallinn", "Zagreb", "Bogota", "Manila", "Jakarta", "Dublin", "Geneva",
               "Lusaka", "Kigali", "Hobart", "Suva", "Apia", "Belize", "Macau", "Malmo", "Turin")
"""Weather-call cities of the eval rows only (none is in CITIES, so no eval prompt shares a city phrase with RL)."""
CURRENCIES = ("USD", "EUR", "JPY", "GBP", "CHF", "INR")

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                    "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "convert_currency", "description": "Convert an amount of money.",
     "parameters": {"type": "object", "properties": {"amount": {"type": "number"}, "source": {"type": "string"},
                                                     "target": {"type": "string"}},
                    "required": ["amount", "source", "target"]}}},
    {"type": "function", "function": {"name": "set_timer", "description": "Start a countdown timer.",
     "parameters": {"type": "object", "properties": {"minutes": {"type": "integer"}, "label": {"type": "string"}},
                    "required": ["minutes", "label"]}}},
]


MCQA_ASK = ("Which option equals {what}?\n{lines}\nReply with the letter of the correct option.",
            "Pick the choice that is {what}.\n{lines}\nAnswer with one letter only.")
"""(RL, eval) wording of a multiple-choice question."""


def _mcqa(rng: random.Random, template: str = MCQA_ASK[0]) -> dict[str, Any]:
    a, b = rng.randint(11, 89), rng.randint(11, 89)
    op = rng.choice(["sum", "difference"])
    right = a + b if op == "sum" else a - b
    wrong = {right + d for d in rng.sample([-11, -10, -2, -1, 1, 2, 9, 10], 6)} - {right}
    options = [right, *rng.sample(sorted(wrong), 3)]
    rng.shuffle(options)
    letter = "ABCD"[options.index(right)]
    lines = "\n".join(f"{'ABCD'[i]}) {v}" for i, v in enumerate(options))
    what = f"the sum of {a} and {b}" if op == "sum" else f"{a} minus {b}"
    prompt = template.format(what=what, lines=lines)
    return {"key": [op, a, b], "prompt": prompt, "answer": letter}


def _tool_call(rng: random.Random, cities: tuple[str, ...] = CITIES) -> dict[str, Any]:
    which = rng.randrange(3)
    if which == 0:
        city, unit = rng.choice(cities), rng.choice(["celsius", "fahrenheit"])
        prompt, call = f"How warm is it in {city} right now, in {unit}?", {"name": "get_weather",
                                                                            "arguments": {"city": city, "unit": unit}}
    elif which == 1:
        amount, src, dst = rng.randint(2, 900), *rng.sample(CURRENCIES, 2)
        prompt = f"Convert {amount} {src} to {dst}."
        call = {"name": "convert_currency", "arguments": {"amount": amount, "source": src, "target": dst}}
    else:
        minutes, label = rng.randint(1, 90), rng.choice(["tea", "pasta", "laundry", "break", "bread", "call"])
        prompt = f"Set a {minutes} minute timer called {label}."
        call = {"name": "set_timer", "arguments": {"minutes": minutes, "label": label}}
    return {"key": call, "prompt": prompt, "tools": json.dumps(TOOLS), "reference_call": json.dumps(call)}


STRUCTURED_ASK = (
    ("{name} is {age} years old, lives in {city} and {status}. Reply with only a JSON object: "
     "name (string), age (integer), city (string), member (boolean), no other keys."),
    ("Profile card: {name}; age {age}; home {city}; {status}. Return one JSON object and nothing else, "
     "keys: member (boolean), city (string), age (integer), name (string)."))
"""(RL, eval) wording of an extraction request."""


def _structured(rng: random.Random, template: str = STRUCTURED_ASK[0]) -> dict[str, Any]:
    name, age, city = rng.choice(NAMES), rng.randint(18, 80), rng.choice(CITIES)
    member = rng.choice([True, False])
    schema = {"type": "object", "additionalProperties": False, "required": ["name", "age", "city", "member"],
              "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"},
                             "member": {"type": "boolean"}}}
    status = "is a club member" if member else "is not a club member"
    prompt = template.format(name=name, age=age, city=city, status=status)
    return {"key": [name, age, city, member], "prompt": prompt, "json_schema": json.dumps(schema)}


def _mcqa_sft(rng: random.Random) -> dict[str, Any]:
    item = _mcqa(rng)
    _op, a, b = item["key"]
    right = a + b if _op == "sum" else a - b
    sign = "plus" if _op == "sum" else "minus"
    think = f"{a} {sign} {b} is {right}, which is option {item['answer']}."
    return _responses(item, think, f"Answer: {item['answer']}")


def _tool_call_sft(rng: random.Random) -> dict[str, Any]:
    item = _tool_call(rng)
    call = item["key"]
    think = f"The {call['name']} tool answers this; its arguments are {', '.join(call['arguments'])}."
    return _responses(item, think, f"<tool_call>\n{json.dumps(call)}\n</tool_call>")


def _structured_sft(rng: random.Random) -> dict[str, Any]:
    item = _structured(rng)
    name, age, city, member = item["key"]
    think = "The schema asks for name, age, city and member, with no other keys."
    return _responses(item, think, json.dumps({"name": name, "age": age, "city": city, "member": member}))


def _responses(item: dict[str, Any], think: str, answer: str) -> dict[str, Any]:
    return item | {"think_response": f"<think>\n{think}\n</think>\n{answer}", "no_think_response": answer}


SFT_FIELDS = ("prompt", "think_response", "no_think_response")


def mcqa_sft(seed: int) -> list[Record]:
    """Multiple-choice questions answered `Answer: <letter>` (an SFT source, domain `chat`)."""
    return [public(i, SFT_FIELDS) for i in draw(make_rng("mcqa_sft", seed), 120, _mcqa_sft, SFT_SLOTS)]


def tool_call_sft(seed: int) -> list[Record]:
    """Tool requests answered with one typed `<tool_call>` block (an SFT source, domain `tool`)."""
    rows = draw(make_rng("tool_call_sft", seed), 80, _tool_call_sft, SFT_SLOTS)
    return [public(i, ("prompt", "tools", *SFT_FIELDS[1:])) for i in rows]


def structured_output_sft(seed: int) -> list[Record]:
    """Extraction requests answered with the bare JSON object (an SFT source, domain `chat`)."""
    return [public(i, SFT_FIELDS) for i in draw(make_rng("structured_output_sft", seed), 60, _structured_sft, SFT_SLOTS)]


def mcqa_rl(seed: int) -> list[Record]:
    """Multiple-choice arithmetic questions (domain `mcqa`)."""
    return [public(i, ("prompt", "answer")) for i in draw(make_rng("mcqa_rl", seed), 120, _mcqa, RL_SLOTS)]


def tool_call_rl(seed: int) -> list[Record]:
    """Requests one declared tool answers (domain `tool_call`)."""
    rows = draw(make_rng("tool_call_rl", seed), 80, _tool_call, RL_SLOTS)
    return [public(i, ("prompt", "tools", "reference_call")) for i in rows]


def structured_output_rl(seed: int) -> list[Record]:
    """Extraction into a strict JSON Schema (domain `structured_output`)."""
    rows = draw(make_rng("structured_output_rl", seed), 60, _structured, RL_SLOTS)
    return [public(i, ("prompt", "json_schema")) for i in rows]


EVAL_ROWS = 128


def mcqa_eval(seed: int) -> list[Record]:
    """Held-out multiple-choice questions (eval domain `mcqa`): eval slots, eval wording."""
    rows = draw(make_rng("mcqa_eval", seed), EVAL_ROWS, lambda r: _mcqa(r, MCQA_ASK[1]), EVAL_SLOTS)
    return [public(i, ("prompt", "answer")) for i in rows]


def tool_call_eval(seed: int) -> list[Record]:
    """Held-out tool requests (eval domain `tool_call`): eval slots, eval-only weather cities."""
    rows = draw(make_rng("tool_call_eval", seed), EVAL_ROWS, lambda r: _tool_call(r, EVAL_CITIES), EVAL_SLOTS)
    return [public(i, ("prompt", "tools", "reference_call")) for i in rows]


def structured_output_eval(seed: int) -> list[Record]:
    """Held-out extraction requests (eval domain `structured_output`): eval slots, eval wording."""
    rows = draw(make_rng("structured_output_eval", seed), EVAL_ROWS, lambda r: _structured(r, STRUCTURED_ASK[1]),
                EVAL_SLOTS)
    return [public(i, ("prompt", "json_schema")) for i in rows]


GENERATORS = {"mcqa_rl": mcqa_rl, "tool_call_rl": tool_call_rl, "structured_output_rl": structured_output_rl,
              "mcqa_eval": mcqa_eval, "tool_call_eval": tool_call_eval, "structured_output_eval": structured_output_eval,
              "mcqa_sft": mcqa_sft, "tool_call_sft": tool_call_sft, "structured_output_sft": structured_output_sft}
