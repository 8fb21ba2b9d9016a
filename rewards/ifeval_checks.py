"""The 25 IFEval instruction checks, with IFEval's instruction ids and kwarg names.

Semantics follow google-research `instruction_following_eval` (instructions.py, the
registry's 25 ids). Each check is a pure function `(text, **kwargs) -> bool`; its kwargs
are declared with a converter that validates and normalises them once per row, so a
malformed row is reported (`BadKwargs`) instead of being scored.

Deliberate differences from the reference, all on inputs it mishandles:
- a missing kwarg is an error; the reference silently draws a *random* value, which
  makes a verifier meaningless;
- keywords, forbidden words, postscript markers and section splitters are matched
  literally (`re.escape`); the reference pastes them into regexes unescaped, which only
  differs (or crashes) for strings with regex metacharacters, e.g. `C++`;
- `nth_paragraph` outside 1..num_paragraphs, negative counts, a `letter` that is not one
  non-space character and an unknown relation are errors (the reference re-randomises or
  raises);
- `no_comma` refuses every Unicode comma (`COMMAS`), not only the ASCII one: a fullwidth
  `，` reads as a comma and must not dodge the instruction.
Every check runs in linear time: the reference's regexes for placeholders, bullet lists and
titles backtrack quadratically on inputs like `[[[[...`, a run of newlines or `<<<<...`;
here they are rewritten to find the same matches in one pass.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from rewards.ifeval_text import count_capital_words, count_sentences, count_words, detect_language

RELATIONS = ("less than", "at least")
CONSTRAINED_RESPONSES = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


class BadKwargs(ValueError):
    """An instruction's kwargs are missing, unexpected or malformed (a data error)."""


# ---- kwarg converters: (value, name) -> normalised value, or BadKwargs -------------------

def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadKwargs(f"{name} must be an integer, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise BadKwargs(f"{name} must be an integer, got {value!r}")
    if value < 0:
        raise BadKwargs(f"{name} must be non-negative, got {value!r}")
    return int(value)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadKwargs(f"{name} must be a non-empty string, got {value!r}")
    return value.strip()


def _words(value: Any, name: str) -> tuple[str, ...]:
    # A bare string would be iterated character by character: refuse it.
    if not isinstance(value, (list, tuple)) or not value:
        raise BadKwargs(f"{name} must be a non-empty list of strings, got {value!r}")
    return tuple(_text(v, name) for v in value)


def _relation(value: Any, name: str) -> str:
    if value not in RELATIONS:
        raise BadKwargs(f"{name} must be one of {RELATIONS}, got {value!r}")
    return value


def _letter(value: Any, name: str) -> str:
    if not isinstance(value, str) or len(value.strip()) != 1:
        raise BadKwargs(f"{name} must be a single non-whitespace character, got {value!r}")
    return value.strip().lower()


def _compare(actual: int, relation: str, threshold: int) -> bool:
    return actual < threshold if relation == "less than" else actual >= threshold


# ---- the registry ----------------------------------------------------------------------

@dataclass(frozen=True)
class Instruction:
    """One IFEval instruction type."""

    id: str
    """IFEval's instruction id, e.g. `keywords:existence`."""
    params: Mapping[str, Callable[[Any, str], Any]]
    """Kwarg name -> converter; every declared kwarg is required."""
    check: Callable[..., bool]
    """`check(text, **kwargs) -> bool`: whether `text` follows the instruction."""
    validate: Callable[[dict[str, Any]], None] | None = None
    """Cross-kwarg validation, raising BadKwargs."""

    def bind(self, raw: Mapping[str, Any] | None) -> Callable[[str], bool]:
        """Validate `raw` kwargs once; return `text -> bool`. None-valued keys are ignored
        (the Hugging Face IFEval rows carry every kwarg of every type, mostly null)."""
        given = {k: v for k, v in (raw or {}).items() if v is not None}
        unexpected = sorted(set(given) - set(self.params))
        if unexpected:
            raise BadKwargs(f"{self.id}: unexpected kwargs {unexpected}")
        missing = sorted(set(self.params) - set(given))
        if missing:
            raise BadKwargs(f"{self.id}: missing kwargs {missing}")
        kwargs = {name: conv(given[name], name) for name, conv in self.params.items()}
        if self.validate is not None:
            self.validate(kwargs)
        check = self.check
        return lambda text: bool(check(text, **kwargs))


INSTRUCTIONS: dict[str, Instruction] = {}


def _register(instruction_id: str, validate: Callable[[dict[str, Any]], None] | None = None,
              **params: Callable[[Any, str], Any]) -> Callable[[Callable[..., bool]], Callable[..., bool]]:
    def wrap(check: Callable[..., bool]) -> Callable[..., bool]:
        INSTRUCTIONS[instruction_id] = Instruction(instruction_id, params, check, validate)
        return check
    return wrap


# keywords ------------------------------------------------------------------------------

@_register("keywords:existence", keywords=_words)
def keywords_existence(text: str, keywords: tuple[str, ...]) -> bool:
    """Every keyword occurs (case-insensitive substring)."""
    return all(re.search(re.escape(k), text, re.IGNORECASE) for k in keywords)


@_register("keywords:frequency", keyword=_text, frequency=_count, relation=_relation)
def keywords_frequency(text: str, keyword: str, frequency: int, relation: str) -> bool:
    """Case-insensitive, non-overlapping substring occurrences compared with `frequency`."""
    return _compare(len(re.findall(re.escape(keyword), text, re.IGNORECASE)), relation, frequency)


@_register("keywords:forbidden_words", forbidden_words=_words)
def keywords_forbidden_words(text: str, forbidden_words: tuple[str, ...]) -> bool:
    """No forbidden word occurs as a whole word (case-insensitive)."""
    return not any(re.search(r"\b" + re.escape(w) + r"\b", text, re.IGNORECASE) for w in forbidden_words)


@_register("keywords:letter_frequency", letter=_letter, let_frequency=_count, let_relation=_relation)
def keywords_letter_frequency(text: str, letter: str, let_frequency: int, let_relation: str) -> bool:
    """Occurrences of one character, case-insensitive."""
    return _compare(text.lower().count(letter), let_relation, let_frequency)


# language ------------------------------------------------------------------------------

@_register("language:response_language", language=_text)
def response_language(text: str, language: str) -> bool:
    """langdetect's verdict equals the ISO 639-1 code; undetectable text counts as followed
    (IFEval's rule: e.g. a response of only digits)."""
    detected = detect_language(text)
    return detected is None or detected == language


# length constraints --------------------------------------------------------------------

@_register("length_constraints:number_sentences", num_sentences=_count, relation=_relation)
def number_sentences(text: str, num_sentences: int, relation: str) -> bool:
    """Punkt sentence count compared with `num_sentences`."""
    return _compare(count_sentences(text), relation, num_sentences)


@_register("length_constraints:number_paragraphs", num_paragraphs=_count)
def number_paragraphs(text: str, num_paragraphs: int) -> bool:
    """Exactly `num_paragraphs` paragraphs separated by `***`; an empty paragraph is
    allowed only before the first or after the last divider."""
    paragraphs = re.split(r"\s?\*\*\*\s?", text)
    count = len(paragraphs)
    for i, paragraph in enumerate(paragraphs):
        if not paragraph.strip():
            if i in (0, len(paragraphs) - 1):
                count -= 1
            else:
                return False
    return count == num_paragraphs


@_register("length_constraints:number_words", num_words=_count, relation=_relation)
def number_words(text: str, num_words: int, relation: str) -> bool:
    """`\\w+` word count compared with `num_words`."""
    return _compare(count_words(text), relation, num_words)


def _nth_in_range(kw: dict[str, Any]) -> None:
    if not 1 <= kw["nth_paragraph"] <= kw["num_paragraphs"]:
        raise BadKwargs(f"nth_paragraph must be in 1..num_paragraphs, got {kw['nth_paragraph']}")


_FIRST_WORD_STOP = frozenset(".,?!'\"")


@_register("length_constraints:nth_paragraph_first_word", validate=_nth_in_range,
           num_paragraphs=_count, nth_paragraph=_count, first_word=_text)
def nth_paragraph_first_word(text: str, num_paragraphs: int, nth_paragraph: int, first_word: str) -> bool:
    """Exactly `num_paragraphs` non-empty `\\n\\n`-separated paragraphs, and paragraph
    `nth_paragraph` (1-based, indexed in the raw split as IFEval does) starts with
    `first_word`, compared lower-case up to the first punctuation mark."""
    paragraphs = text.split("\n\n")
    count = sum(1 for p in paragraphs if p.strip())
    if nth_paragraph > count:
        return False
    paragraph = paragraphs[nth_paragraph - 1].strip()
    if not paragraph:
        return False
    word = paragraph.split()[0].strip().lstrip("'").lstrip('"')
    head = []
    for ch in word:
        if ch in _FIRST_WORD_STOP:
            break
        head.append(ch.lower())
    return count == num_paragraphs and "".join(head) == first_word.lower()


# detectable content --------------------------------------------------------------------

@_register("detectable_content:number_placeholders", num_placeholders=_count)
def number_placeholders(text: str, num_placeholders: int) -> bool:
    """At least `num_placeholders` square-bracket placeholders such as `[address]`."""
    return count_placeholders(text) >= num_placeholders


def count_placeholders(text: str) -> int:
    """Matches of IFEval's `\\[.*?\\]` in linear time (the regex is quadratic on `[[[[...`):
    the first `[` of a stretch pairs with the next `]` on its line, then the scan resumes.

    >>> count_placeholders("[a] [b [c]\\n[d"), count_placeholders("[" * 5)
    (2, 0)
    """
    count = 0
    for line in text.split("\n"):
        start = line.find("[")
        while start >= 0:
            end = line.find("]", start + 1)
            if end < 0:
                break
            count += 1
            start = line.find("[", end + 1)
    return count


@_register("detectable_content:postscript", postscript_marker=_text)
def postscript(text: str, postscript_marker: str) -> bool:
    """The marker occurs anywhere (case-insensitive); `P.S.` and `P.P.S` also accept a
    space after each dot (`P. S.`)."""
    if postscript_marker == "P.P.S":
        pattern = r"p\.\s?p\.\s?s"
    elif postscript_marker == "P.S.":
        pattern = r"p\.\s?s\."
    else:
        pattern = re.escape(postscript_marker.lower())
    return re.search(pattern, text.lower()) is not None


# detectable format ---------------------------------------------------------------------

@_register("detectable_format:number_bullet_lists", num_bullets=_count)
def number_bullet_lists(text: str, num_bullets: int) -> bool:
    """Exactly `num_bullets` markdown bullet lines (`* item` or `- item`).

    IFEval's `^\\s*` may run over blank lines before a bullet, which counts the same bullets
    but is quadratic on a long run of newlines; `[^\\S\\n]*` stays on the bullet's line."""
    stars = re.findall(r"^[^\S\n]*\*[^\*].*$", text, flags=re.MULTILINE)
    dashes = re.findall(r"^[^\S\n]*-.*$", text, flags=re.MULTILINE)
    return len(stars) + len(dashes) == num_bullets


@_register("detectable_format:constrained_response")
def constrained_response(text: str) -> bool:
    """Contains one of `My answer is yes./no./maybe.`."""
    stripped = text.strip()
    return any(option in stripped for option in CONSTRAINED_RESPONSES)


@_register("detectable_format:number_highlighted_sections", num_highlights=_count)
def number_highlighted_sections(text: str, num_highlights: int) -> bool:
    """At least `num_highlights` non-empty `*single-line*` or `**single-line**` spans."""
    singles = [h for h in re.findall(r"\*[^\n\*]*\*", text) if h.strip("*").strip()]
    doubles = [h for h in re.findall(r"\*\*[^\n\*]*\*\*", text) if h[2:-2].strip()]
    return len(singles) + len(doubles) >= num_highlights


@_register("detectable_format:multiple_sections", section_spliter=_text, num_sections=_count)
def multiple_sections(text: str, section_spliter: str, num_sections: int) -> bool:
    """At least `num_sections` markers `<spliter> <number>` (e.g. `Section 1`)."""
    parts = re.split(r"\s?" + re.escape(section_spliter) + r"\s?\d+\s?", text)
    return len(parts) - 1 >= num_sections


@_register("detectable_format:json_format")
def json_format(text: str) -> bool:
    """The whole response parses as JSON, optionally inside a ``` fence."""
    body = text.strip()
    for prefix in ("```json", "```Json", "```JSON", "```"):
        body = body.removeprefix(prefix)
    body = body.removesuffix("```").strip()
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        return False
    return True


@_register("detectable_format:title")
def title(text: str) -> bool:
    """A non-empty single-line title in double angular brackets, `<<like this>>`.

    IFEval's greedy `<<[^\\n]+>>` matches, per line, from the first `<<` to the last `>>`
    (at least one character between); found here with find/rfind, since the regex is
    quadratic on a long line of `<<<<...`."""
    for line in text.split("\n"):
        start, end = line.find("<<"), line.rfind(">>")
        if start >= 0 and end >= start + 3 and line[start:end + 2].lstrip("<").rstrip(">").strip():
            return True
    return False


# combination ---------------------------------------------------------------------------

@_register("combination:two_responses")
def two_responses(text: str) -> bool:
    """Two different responses separated by `******` (empty parts only at the ends)."""
    answers = []
    parts = text.split("******")
    for i, part in enumerate(parts):
        if part.strip():
            answers.append(part.strip())
        elif i not in (0, len(parts) - 1):
            return False
    return len(answers) == 2 and answers[0] != answers[1]


@_register("combination:repeat_prompt", prompt_to_repeat=_text)
def repeat_prompt(text: str, prompt_to_repeat: str) -> bool:
    """The response starts with the request, word for word (case-insensitive)."""
    return text.strip().lower().startswith(prompt_to_repeat.strip().lower())


# start / end ---------------------------------------------------------------------------

@_register("startend:end_checker", end_phrase=_text)
def end_checker(text: str, end_phrase: str) -> bool:
    """Ends with the phrase (case-insensitive, ignoring surrounding whitespace and quotes)."""
    return text.strip().strip('"').lower().endswith(end_phrase.strip().lower())


@_register("startend:quotation")
def quotation(text: str) -> bool:
    """The whole response is wrapped in double quotation marks."""
    stripped = text.strip()
    return len(stripped) > 1 and stripped[0] == '"' and stripped[-1] == '"'


# change case ---------------------------------------------------------------------------

@_register("change_case:capital_word_frequency", capital_frequency=_count, capital_relation=_relation)
def capital_word_frequency(text: str, capital_frequency: int, capital_relation: str) -> bool:
    """Number of all-capital Treebank tokens compared with `capital_frequency`."""
    return _compare(count_capital_words(text), capital_relation, capital_frequency)


@_register("change_case:english_capital")
def english_capital(text: str) -> bool:
    """All letters upper-case and the text is English (undetectable counts as English)."""
    return text.isupper() and detect_language(text) in ("en", None)


@_register("change_case:english_lowercase")
def english_lowercase(text: str) -> bool:
    """All letters lower-case and the text is English (undetectable counts as English)."""
    return text.islower() and detect_language(text) in ("en", None)


# punctuation ---------------------------------------------------------------------------

# Every Unicode punctuation mark named COMMA (fullwidth `，`, ideographic `、`, Arabic `،`, ...),
# plus `‚` (U+201A, a quotation mark drawn as a comma): "no commas" is about what the reader sees.
COMMAS = frozenset(",\u201a\u055d\u060c\u07f8\u1363\u1802\u1808\u2e32\u2e34\u2e41\u2e49\u2e4c\u3001\ua4fe\ua60d"
                   "\ua6f5\ufe10\ufe11\ufe50\ufe51\uff0c\uff64\U0001144d\U0001145a\U00016e97\U0001da87")


@_register("punctuation:no_comma")
def no_comma(text: str) -> bool:
    """No comma anywhere: the ASCII comma or any Unicode comma (`COMMAS`; IFEval checks
    only the ASCII one, which a fullwidth `，` would dodge)."""
    return COMMAS.isdisjoint(text)

