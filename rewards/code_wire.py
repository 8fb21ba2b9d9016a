"""Plain data on the wire between the candidate's process and the judge's.

The code verifier never lets the candidate's objects into the process that decides: arguments
go in and return values come out as text in this format, and only builtin values can be
written or read: None, bool, int, float, str, list, tuple, dict, set, frozenset (exact types,
no subclasses, so no object with a forged `__eq__` can cross). Anything else is an error on
the side that meets it, which the judge scores as a failed test, never a pass.

The format is JSON with tagged containers, so tuples, sets and non-string dict keys survive:
    None, true/false, 12, 1.5, NaN, "text"      as JSON;  {"l": [...]} list, {"t": [...]} tuple,
    {"s": [...]} set, {"f": [...]} frozenset, {"d": [[key, value], ...]} dict.
Decoding accepts nothing else (unknown tags, extra keys, over-deep nesting or over-long text
are `WireError`), so a hostile peer can only send values, never code or objects.

This module is stdlib-only and self-contained: its source is embedded in the programs that run
inside the sandboxes (`program_prelude()`).
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64
MAX_CHARS = 1 << 20

_SEQ = {list: "l", tuple: "t", set: "s", frozenset: "f"}
_TAG = {tag: kind for kind, tag in _SEQ.items()}


class WireError(ValueError):
    """A value that is not plain data, or text that is not in the wire format."""


def _to_json(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value
    if kind in _SEQ:
        items = [_to_json(v, depth + 1) for v in value]
        if kind in (set, frozenset):
            items.sort(key=lambda item: json.dumps(item, sort_keys=True))
        return {_SEQ[kind]: items}
    if kind is dict:
        return {"d": [[_to_json(k, depth + 1), _to_json(v, depth + 1)] for k, v in value.items()]}
    raise WireError(f"not plain data: {kind.__name__}")


def encode(value: Any) -> str:
    """`value` as one line of wire text; WireError for anything that is not plain data.

    >>> encode((1, [2.5, "a"], {None: {3}}))
    '{"t": [1, {"l": [2.5, "a"]}, {"d": [[null, {"s": [3]}]]}]}'
    """
    text = json.dumps(_to_json(value, 0), allow_nan=True)
    if len(text) > MAX_CHARS:
        raise WireError(f"value longer than {MAX_CHARS} characters on the wire")
    return text


def _from_json(node: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    if node is None or type(node) in (bool, int, str, float):
        return node
    if type(node) is dict and len(node) == 1:
        (tag, items), = node.items()
        if type(items) is not list:
            raise WireError(f"tag {tag!r} needs a list")
        if tag == "d":
            out = {}
            for pair in items:
                if type(pair) is not list or len(pair) != 2:
                    raise WireError("dict items must be [key, value] pairs")
                key = _from_json(pair[0], depth + 1)
                try:
                    out[key] = _from_json(pair[1], depth + 1)
                except TypeError as err:
                    raise WireError(f"unhashable dict key: {err}") from None
            return out
        if tag in _TAG:
            values = [_from_json(v, depth + 1) for v in items]
            try:
                return _TAG[tag](values)
            except TypeError as err:
                raise WireError(f"unhashable set member: {err}") from None
    raise WireError(f"not wire format: {str(node)[:80]!r}")


def decode(text: str | bytes) -> Any:
    """The value a line of wire text holds; WireError for anything else.

    >>> decode('{"t": [1, {"s": [2]}]}')
    (1, {2})
    >>> decode('{"__class__": ["os.system"]}')
    Traceback (most recent call last):
    ...
    rewards.code_wire.WireError: not wire format: "{'__class__': ['os.system']}"
    """
    if len(text) > MAX_CHARS:
        raise WireError(f"more than {MAX_CHARS} characters")
    try:
        node = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise WireError(f"not JSON: {err}") from None
    return _from_json(node, 0)


def program_prelude() -> str:
    """This module's source, to paste at the top of a program that runs in a sandbox."""
    from pathlib import Path

    return Path(__file__).read_text()
