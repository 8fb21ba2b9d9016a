"""Fenced code blocks of a completion (```tag ... ```), found in linear time.

The code and SWE rewards take their program or patch from the last fenced block of the text
the policy wrote. The regular expression they used (```[ \\t]*(tag)[^\\n]*\\n(.*?)```) backtracks
quadratically on an opening fence with no newline after it: "```" followed by 40,000 letters
took 3 s and a 100 k-character completion about 20 s, so a policy could stall the reward.
This scanner reads each fence once and gives the same blocks as that expression.
"""

from __future__ import annotations

import re

_TAG_RE = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(tag, body) of every fenced block, in order: an opening ``` and its info line (whose first
    word is the tag), the body up to the next ```. An unclosed fence ends the scan.

    >>> fenced_blocks("a ```python\\nx = 1\\n``` b ```\\ny\\n``` ```py")
    [('python', 'x = 1\\n'), ('', 'y\\n')]
    >>> fenced_blocks("```" + "a" * 10), fenced_blocks("``` diff extra\\n-a\\n+b\\n```")
    ([], [('diff', '-a\\n+b\\n')])
    """
    blocks, i = [], 0
    while True:
        start = text.find("```", i)
        if start < 0:
            return blocks
        newline = text.find("\n", start + 3)
        if newline < 0:
            return blocks
        end = text.find("```", newline + 1)
        if end < 0:
            return blocks
        tag = _TAG_RE.match(text, start + 3, newline)
        blocks.append((tag.group(1) if tag else "", text[newline + 1:end]))
        i = end + 3
