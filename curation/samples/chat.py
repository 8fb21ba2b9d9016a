"""General chat, preference and tool-calling sample data. See `curation.samples`."""

from __future__ import annotations

import json
import random
from typing import Any

from curation.samples.common import EVAL_SLOTS, RL_SLOTS, SFT_SLOTS, draw, interleave, make_rng

# (country, capital, main language)
COUNTRIES = [
    ("France", "Paris", "French"), ("Japan", "Tokyo", "Japanese"), ("Kenya", "Nairobi", "Swahili and English"),
    ("Peru", "Lima", "Spanish"), ("Norway", "Oslo", "Norwegian"), ("Egypt", "Cairo", "Arabic"),
    ("Canada", "Ottawa", "English and French"), ("Vietnam", "Hanoi", "Vietnamese"), ("Poland", "Warsaw", "Polish"),
    ("Chile", "Santiago", "Spanish"), ("Ghana", "Accra", "English"), ("Greece", "Athens", "Greek"),
    ("Turkey", "Ankara", "Turkish"), ("Portugal", "Lisbon", "Portuguese"), ("Thailand", "Bangkok", "Thai"),
    ("Ireland", "Dublin", "English and Irish"), ("Hungary", "Budapest", "Hungarian"), ("Nepal", "Kathmandu", "Nepali"),
    ("Morocco", "Rabat", "Arabic and Berber"), ("Finland", "Helsinki", "Finnish and Swedish"),
    ("Argentina", "Buenos Aires", "Spanish"), ("Austria", "Vienna", "German"), ("Iceland", "Reykjavik", "Icelandic"),
    ("Cuba", "Havana", "Spanish"), ("Mongolia", "Ulaanbaatar", "Mongolian"), ("Senegal", "Dakar", "French and Wolof"),
    ("Sweden", "Stockholm", "Swedish"), ("Indonesia", "Jakarta", "Indonesian"), ("Colombia", "Bogota", "Spanish"),
    ("Denmark", "Copenhagen", "Danish"), ("Ethiopia", "Addis Ababa", "Amharic"), ("Croatia", "Zagreb", "Croatian"),
]
WORDS = [
    ("ephemeral", "lasting for a very short time"), ("candid", "truthful and straightforward"),
    ("meticulous", "showing great attention to detail"), ("frugal", "careful not to spend much money"),
    ("resilient", "able to recover quickly from difficulties"), ("verbose", "using more words than needed"),
    ("lucid", "clear and easy to understand"), ("tenacious", "holding firmly to a goal"),
    ("ambiguous", "open to more than one meaning"), ("benevolent", "kind and well meaning"),
    ("mundane", "ordinary and not exciting"), ("novice", "a person new to an activity"),
    ("prudent", "acting with care for the future"), ("serene", "calm and peaceful"),
    ("obsolete", "no longer in use"), ("diligent", "careful and hard working"),
    ("eloquent", "fluent and persuasive in speech"), ("scarce", "in short supply"),
    ("tranquil", "free from disturbance"), ("vivid", "bright and intense"),
    ("arid", "very dry with little rain"), ("nimble", "quick and light in movement"),
]
CONVERSIONS = [("minutes", "hours", 60), ("seconds", "minutes", 60), ("centimeters", "meters", 100),
               ("grams", "kilograms", 1000), ("days", "weeks", 7), ("months", "years", 12), ("millimeters", "centimeters", 10)]
TIPS = [
    ("sleeping better", "Keep a regular bedtime and put screens away an hour before sleep."),
    ("learning to cook", "Start with three simple recipes and repeat them until they feel easy."),
    ("saving money", "Move a fixed amount to savings on payday before you spend anything."),
    ("studying for exams", "Test yourself with practice questions instead of rereading notes."),
    ("running a first 5K", "Alternate walking and running and add a little running each week."),
    ("keeping houseplants alive", "Check the soil with a finger and water only when it feels dry."),
    ("public speaking", "Rehearse out loud twice and pause instead of saying um."),
    ("writing emails", "Put the request in the first sentence and keep it short."),
    ("remembering names", "Repeat the name once in conversation right after you hear it."),
    ("staying focused", "Work in 25 minute blocks and silence notifications during each one."),
    ("drinking more water", "Keep a filled bottle on your desk and refill it at each break."),
    ("packing for a trip", "Lay everything out first and then remove a third of it."),
]
# MCQ categories: (category, members, non-members)
CATEGORIES = [
    ("mammal", ["dolphin", "bat", "whale", "otter"], ["shark", "eagle", "frog", "salmon", "lizard"]),
    ("planet", ["Mars", "Venus", "Saturn", "Neptune"], ["Moon", "Sun", "Pluto", "Sirius", "Halley"]),
    ("prime number", ["7", "13", "29", "31"], ["9", "15", "21", "27", "33"]),
    ("primary color of light", ["red", "green", "blue"], ["yellow", "purple", "orange", "brown"]),
    ("noble gas", ["neon", "argon", "helium", "xenon"], ["oxygen", "nitrogen", "hydrogen", "carbon"]),
    ("citrus fruit", ["lemon", "lime", "orange", "grapefruit"], ["apple", "banana", "cherry", "grape"]),
]


def chat_item(rng: random.Random) -> dict[str, Any]:
    """One chat prompt with parallel think / no-think responses (ground truth for MCQs)."""
    kind = rng.choice(["capital", "define", "convert", "tip", "mcq", "followup"])
    gt = None
    slot_key = None
    if kind == "capital":
        country, capital, _ = rng.choice(COUNTRIES)
        prompt = rng.choice(["What is the capital of {c}?", "Which city is the capital of {c}?",
                             "Name the capital city of {c}."]).format(c=country)
        key = ["capital", country]
        think, answer = f"{capital} is the seat of government of {country}.", f"The capital of {country} is {capital}."
    elif kind == "define":
        word, meaning = rng.choice(WORDS)
        prompt = rng.choice(["What does '{w}' mean?", "Define the word {w}.", "Explain the meaning of {w}."]).format(w=word)
        key = ["define", word]
        think, answer = f"{word} is an adjective or noun meaning {meaning}.", f"'{word.capitalize()}' means {meaning}."
    elif kind == "convert":
        small, big, factor = rng.choice(CONVERSIONS)
        n = rng.randint(2, 40)
        prompt = f"How many {small} are in {n} {big}?"
        key = ["convert", small, n]
        think = f"One unit of {big} has {factor} {small}, so {n} * {factor} = {n * factor}."
        answer = f"There are {n * factor} {small} in {n} {big}."
    elif kind == "tip":
        topic, tip = rng.choice(TIPS)
        prompt = rng.choice(["Give me one tip for {t}.", "Any advice on {t}?", "What helps with {t}?"]).format(t=topic)
        key = ["tip", topic]
        think, answer = f"The user wants one practical tip about {topic}.", tip
    elif kind == "mcq":
        category, members, others = rng.choice(CATEGORIES)
        right, wrong = rng.choice(members), rng.sample(others, 3)
        options = [right] + wrong
        rng.shuffle(options)
        gt = "ABCD"[options.index(right)]
        lead = rng.choice(["Pick the {c}:", "Choose the {c}:"]).format(c=category)
        prompt = f"{lead} " + " ".join(f"({l}) {o}" for l, o in zip("ABCD", options))
        key = ["mcq", category, sorted(options)]
        slot_key = ["mcq", category]  # a category is either held out or trained on, never both
        think, answer = f"Only {right} is a {category}.", f"The answer is ({gt}): {right}."
    else:
        country, capital, language = rng.choice(COUNTRIES)
        turns = [{"role": "user", "content": f"What is the capital of {country}?"},
                 {"role": "assistant", "content": f"<think>\n{country} has its government in {capital}.\n</think>\nIt is {capital}."},
                 {"role": "user", "content": rng.choice(["Which language is spoken in {c}?",
                                                         "What language do people in {c} speak?"]).format(c=capital)}]
        prompt = json.dumps(turns)
        key = ["followup", country]
        slot_key = ["capital", country]  # its first turn is the capital question: same held-out slot
        think, answer = f"The previous answer was {capital} in {country}.", f"In {country} people mainly speak {language}."
    return {"key": key, "slot_key": slot_key or key, "prompt": prompt, "think_response": f"<think>\n{think}\n</think>\n{answer}",
            "no_think_response": answer, "ground_truth": gt}


def chat_sft(seed: int) -> list:
    rng = make_rng("chat_sft", seed)
    rows = [{k: it[k] for k in ("prompt", "think_response", "no_think_response", "ground_truth")}
            for it in draw(rng, 240, chat_item, SFT_SLOTS)]
    mcqs = [r for r in rows if r["ground_truth"]]
    for row in rng.sample(mcqs, min(3, len(mcqs))):  # teacher slips the ground truth catches
        other = next(l for l in "ABCD" if l != row["ground_truth"])
        row["no_think_response"] = f"The answer is ({other})."
    return rows


def chat_rl(seed: int) -> list:
    rng = make_rng("chat_rl", seed)
    return [{"prompt": it["prompt"]} for it in draw(rng, 120, chat_item, RL_SLOTS)]


EVAL_ROWS = 128


def _unseen_conversion(rng: random.Random) -> dict[str, Any]:
    """A unit conversion with a count no training row uses (training counts are 2-40)."""
    small, big, _ = rng.choice(CONVERSIONS)
    n = rng.randint(41, 400)
    return {"key": ["convert", small, n], "slot_key": ["held-out-count"], "prompt": f"How many {small} are in {n} {big}?"}


def chat_eval(seed: int) -> list:
    """The held-out chat prompts (scored by the reward model): every held-out slot of `chat_item`
    (64 distinct problems), topped up with unit conversions of counts training never sees."""
    rng = make_rng("chat_eval", seed)
    rows = [{"prompt": it["prompt"]} for it in draw(rng, 64, chat_item, EVAL_SLOTS)]
    extra = draw(rng, EVAL_ROWS - len(rows), _unseen_conversion, tuple(range(10)))
    return rows + [{"prompt": it["prompt"]} for it in extra]


RUDE = ["That is an easy question. Look it up yourself.", "Why would you even ask that?",
        "Figure it out on your own.", "I do not have time for this."]
UNHELPFUL = ["I am not sure.", "Maybe. It depends.", "Hard to say.", "You could ask someone else."]
SWITCHES = ["pero no estoy seguro", "je pense que c'est correct", "aber vielleicht auch nicht", "ma forse no",
            "mas depende do caso"]


def preference(seed: int) -> list:
    """Chosen: the helpful answer. Rejected: rude, unhelpful or code-switching."""
    rng = make_rng("preference", seed)
    rows = []
    for it in draw(rng, 200, chat_item, SFT_SLOTS + RL_SLOTS):
        style = rng.choice(["rude", "unhelpful", "switch"])
        if style == "rude":
            rejected = rng.choice(RUDE)
        elif style == "unhelpful":
            rejected = rng.choice(UNHELPFUL)
        else:
            rejected = f"{it['no_think_response'].rstrip('.')}, {rng.choice(SWITCHES)}."
        rows.append({"prompt": it["prompt"], "chosen": it["no_think_response"], "rejected": rejected})
    return interleave(rows, ['{"prompt": "What is 2+2?", "chosen": "4"', json.dumps({"prompt": "Hi", "chosen": "Hello!"})], rng)


# ---- tools ------------------------------------------------------------------------------------
def _fn(name: str, description: str, **params: str) -> dict[str, Any]:
    return {"name": name, "description": description,
            "parameters": {"type": "object", "properties": {k: {"type": "string", "description": v} for k, v in params.items()},
                           "required": list(params)}}


TOOLS = {
    "get_weather": _fn("get_weather", "Current weather for a city", city="City name", unit="celsius or fahrenheit"),
    "convert_currency": _fn("convert_currency", "Convert an amount between currencies", amount="Amount",
                            source="ISO code to convert from", target="ISO code to convert to"),
    "set_timer": _fn("set_timer", "Start a countdown timer", minutes="Length in minutes", label="Timer label"),
    "translate": _fn("translate", "Translate text into another language", text="Text to translate",
                     language="Target language"),
    "get_stock_price": _fn("get_stock_price", "Latest price of a stock", symbol="Ticker symbol"),
}
CURRENCIES = ["USD", "EUR", "JPY", "GBP", "CHF", "NOK", "INR"]
PHRASES = ["good morning", "thank you very much", "where is the station", "see you tomorrow", "the soup is hot"]
LANGS = ["French", "Spanish", "German", "Italian", "Japanese"]
SYMBOLS = ["AAPL", "MSFT", "NVDA", "TSLA", "AMZN", "SAP", "ASML"]


def tool_item(rng: random.Random) -> dict[str, Any]:
    """A request that needs one tool call (or, sometimes, none), with 2-3 tools on offer."""
    name = rng.choice(sorted(TOOLS) + ["none"])
    if name == "get_weather":
        city, unit = rng.choice(COUNTRIES)[1], rng.choice(["celsius", "fahrenheit"])
        prompt, args = f"What's the weather in {city} right now, in {unit}?", {"city": city, "unit": unit}
    elif name == "convert_currency":
        amount, (src, dst) = rng.randint(5, 900), rng.sample(CURRENCIES, 2)
        prompt, args = f"How much is {amount} {src} in {dst}?", {"amount": str(amount), "source": src, "target": dst}
    elif name == "set_timer":
        minutes, label = rng.randint(1, 90), rng.choice(["pasta", "laundry", "tea", "study break", "bread"])
        prompt, args = f"Set a {minutes} minute timer for the {label}.", {"minutes": str(minutes), "label": label}
    elif name == "translate":
        text, lang = rng.choice(PHRASES), rng.choice(LANGS)
        prompt, args = f"Translate '{text}' into {lang}.", {"text": text, "language": lang}
    elif name == "get_stock_price":
        sym = rng.choice(SYMBOLS)
        prompt, args = f"What is {sym} trading at?", {"symbol": sym}
    else:
        a, b = rng.randint(2, 30), rng.randint(2, 30)
        prompt, args = f"What is {a} times {b}?", None
    offered = sorted(set(rng.sample(sorted(TOOLS), 2)) | ({name} if name in TOOLS else set()))
    if args is None:
        think, answer = "No tool is needed for simple arithmetic.", f"{a} times {b} is {a * b}."
    else:
        call = json.dumps({"name": name, "arguments": args})
        think, answer = f"The {name} tool answers this; its arguments are {', '.join(args)}.", f"<tool_call>\n{call}\n</tool_call>"
    return {"key": [name, prompt], "prompt": prompt, "tools": json.dumps([TOOLS[t] for t in offered]),
            "think_response": f"<think>\n{think}\n</think>\n{answer}", "no_think_response": answer}


def tool_sft(seed: int) -> list:
    rng = make_rng("tool_sft", seed)
    return [{k: it[k] for k in ("prompt", "tools", "think_response", "no_think_response")}
            for it in draw(rng, 150, tool_item, SFT_SLOTS)]


GENERATORS = {"chat_sft": chat_sft, "chat_rl": chat_rl, "chat_eval": chat_eval, "preference": preference,
              "tool_sft": tool_sft}
