"""rewards.fences: the linear fence scanner gives the blocks the old regular expression gave
(which backtracked quadratically on an opening fence without a newline)."""

from __future__ import annotations

import random
import re

from rewards.code import extract_code
from rewards.fences import fenced_blocks
from rewards.swe import extract_patch

_OLD = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def test_same_blocks_as_the_old_expression() -> None:
    rng = random.Random(0)
    pieces = ["```", "```python", "```py x", "``` diff", "\n", "a", " ", "\t", "`", "-", "print(1)"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 30))) for _ in range(3000)]
    texts += ["```python\nx\n```", "```\n```", "``````\n```", "```py ```\nx\n```", "text ```a\nb"]
    for text in texts:
        assert fenced_blocks(text) == _OLD.findall(text), text


def test_an_unclosed_fence_with_no_newline_is_plain_text() -> None:
    text = "```" + "a" * 200_000
    assert fenced_blocks(text) == [] and extract_code(text) == text and extract_patch(text) is None
