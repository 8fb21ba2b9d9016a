"""Row layouts: the shapes the field's chat data comes in, mapped onto canonical fields.

What: `FORMATS` maps a layout name (a recipe's `sources[].format`) to a function from one raw
record to the canonical fields that layout knows how to derive:

* `canonical`: nothing derived; fields are read by their canonical names (renamed by the
  recipe's `columns`). Today's behaviour.
* `openai`: `messages` [{role, content, tool_calls?, reasoning_content?}] + optional `tools`.
* `sharegpt`: `conversations` [{from, value}] + optional `system`, `tools`.
* `preference`: `chosen` / `rejected` as HH-RLHF transcripts or message lists (UltraFeedback).
* `llama_nemotron`: `input` messages, `output`, `reasoning` on/off, `system_prompt`.
* `nemotron_v1`: `messages` (tool calls allowed), `reasoning` on/off, optional `tools`.

`detect_format` picks a layout from a record's keys (`auto`: the file's layout is the most common
one of its first rows, `detect_layout`). In an `auto` file each row is still read in its own
layout (`mapped_record`): a row the file's layout rejects whose keys name another layout (a
ShareGPT row among OpenAI ones) is read in that one, so a mixed file keeps every well-formed row;
rows the file's layout reads, and rows that name no layout, are judged by the file's layout, so a
single-layout file reads exactly as before. `canonical_record` joins a
layout's fields with the record's other canonical columns (reference answers, tests, ... are
still read by canonical name or `columns`), so the one row validator of curation/sources.py
judges every layout's output, and a broken row raises `InvalidRow` with a named reason.

Why a registry: a new layout is one function and `register_format(name, fn)`; the recipe
loader accepts every registered name. The conversation rules themselves live once in
curation/formats_chat.py.

Fields a layout derives that the target domain lacks are dropped (a system prompt read into
the math domain: the recipe's system prompt is used), except declared `tools`, which only the
`tool` domain can keep (`not_in_domain:tools`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from curation.formats_chat import (
    Turn,
    conversation_fields,
    message_turn,
    prompt_text,
    reasoning_flag,
    split_system,
    tool_call_block,
    tools_json,
)
from curation.schemas import InvalidRow

RowFormat = Callable[[Mapping[str, Any]], dict[str, Any]]


def _list(record: Mapping[str, Any], key: str) -> list[Any]:
    value = record.get(key)
    if value is None:
        raise InvalidRow(f"missing_field:{key}")
    if not isinstance(value, list):
        raise InvalidRow(f"not_a_list:{key}")
    return value


def _system_field(record: Mapping[str, Any]) -> str | None:
    value = record.get("system")
    return value if isinstance(value, str) and value.strip() else None


def canonical_layout(record: Mapping[str, Any]) -> dict[str, Any]:
    """Canonical field names already: nothing to derive."""
    return {}


def openai_layout(record: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI chat `messages` (+ `tools`); the mode follows the final turn's reasoning."""
    aliases = {"developer": "system", "function": "tool"}
    turns = [message_turn(m, aliases) for m in _list(record, "messages")]
    fields = conversation_fields(turns)
    return {**fields, "system": fields["system"] or _system_field(record), "tools": tools_json(record.get("tools"))}


SHAREGPT_ROLES = {
    "system": "system", "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
    "tool": "tool", "observation": "tool", "function_response": "tool",
}


def _sharegpt_turn(item: Any) -> Turn:
    if not isinstance(item, Mapping):
        raise InvalidRow("bad_message")
    who, value = item.get("from", item.get("role")), item.get("value", item.get("content"))
    if who == "function_call":  # an assistant turn that is only tool calls (JSON call or list of calls)
        try:
            calls = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            raise InvalidRow("bad_tool_call") from None
        calls = calls if isinstance(calls, list) else [calls]
        return {"role": "assistant", "content": "\n".join(tool_call_block(c) for c in calls)}
    if who not in SHAREGPT_ROLES:
        raise InvalidRow(f"bad_role:{who}")
    if not isinstance(value, str):
        raise InvalidRow("wrong_type:value")
    return {"role": SHAREGPT_ROLES[who], "content": value}


def sharegpt_layout(record: Mapping[str, Any]) -> dict[str, Any]:
    """ShareGPT `conversations` (human/gpt/system/tool roles, `function_call` turns) + `system`, `tools`."""
    fields = conversation_fields([_sharegpt_turn(t) for t in _list(record, "conversations")])
    return {**fields, "system": fields["system"] or _system_field(record), "tools": tools_json(record.get("tools"))}


def llama_nemotron_layout(record: Mapping[str, Any]) -> dict[str, Any]:
    """Llama-Nemotron post-training rows: `input` turns, `output`, `reasoning`, `system_prompt`."""
    flag = reasoning_flag(record.get("reasoning"))
    system = record.get("system_prompt")
    if flag is None and isinstance(system, str):  # the mode may only be given by the system prompt
        found = re.fullmatch(r"\s*detailed thinking (on|off)\s*", system, re.IGNORECASE)
        flag = found.group(1).lower() if found else None
    raw = record.get("input")
    if raw is None:
        raise InvalidRow("missing_field:input")
    inputs = [{"role": "user", "content": raw}] if isinstance(raw, str) else _list(record, "input")
    output = record.get("output")
    if output is None:
        raise InvalidRow("missing_field:output")
    if not isinstance(output, str):
        raise InvalidRow("wrong_type:output")
    turns = [message_turn(m) for m in inputs] + [{"role": "assistant", "content": output}]
    if isinstance(system, str) and system.strip():
        turns.insert(0, {"role": "system", "content": system})
    return {**conversation_fields(turns, flag, drop_mode_control=True), "tools": tools_json(record.get("tools"))}


def nemotron_v1_layout(record: Mapping[str, Any]) -> dict[str, Any]:
    """Nemotron-Post-Training-Dataset-v1 rows: OpenAI-like `messages`, `reasoning` on/off, `tools`."""
    flag = reasoning_flag(record.get("reasoning"))
    turns = [message_turn(m, {"developer": "system"}) for m in _list(record, "messages")]
    return {**conversation_fields(turns, flag, drop_mode_control=True), "tools": tools_json(record.get("tools"))}


_HH_MARKER = re.compile(r"\n\n(Human|Assistant): ?")


def _transcript(text: str) -> list[Turn]:
    """HH-RLHF transcript `\\n\\nHuman: …\\n\\nAssistant: …` -> turns."""
    pieces = _HH_MARKER.split(text if text.startswith("\n\n") else "\n\n" + text)
    if pieces[0].strip():
        raise InvalidRow("bad_transcript")
    roles = {"Human": "user", "Assistant": "assistant"}
    return [{"role": roles[who], "content": body.strip()} for who, body in zip(pieces[1::2], pieces[2::2])]


def _pair(record: Mapping[str, Any]) -> tuple[list[Turn], list[Turn]] | None:
    """Chosen and rejected conversations, or None when both are plain response strings."""
    chosen, rejected = record.get("chosen"), record.get("rejected")
    for key, value in (("chosen", chosen), ("rejected", rejected)):
        if value is None:
            raise InvalidRow(f"missing_field:{key}")
        if not isinstance(value, (str, list)) or type(value) is not type(chosen):
            raise InvalidRow(f"wrong_type:{key}")
    if isinstance(chosen, list):
        return [message_turn(m) for m in chosen], [message_turn(m) for m in rejected]
    if "\n\nAssistant:" in chosen:
        return _transcript(chosen), _transcript(rejected)
    if record.get("prompt") is None:
        raise InvalidRow("missing_field:prompt")
    return None


def preference_layout(record: Mapping[str, Any]) -> dict[str, Any]:
    """Preference pairs: prompt = the shared turns, chosen / rejected = the final assistant replies."""
    pair = _pair(record)
    if pair is None:  # a prompt (text or messages) and two response strings
        prompt = record["prompt"]
        return {} if not isinstance(prompt, list) else {"prompt": prompt_text(split_system([message_turn(m) for m in prompt])[1])}
    (_, chosen), (_, rejected) = (split_system(turns) for turns in pair)
    for turns in (chosen, rejected):
        if not turns or turns[-1]["role"] != "assistant":
            raise InvalidRow("no_assistant_turn")
        if not turns[-1]["content"].strip():
            raise InvalidRow("empty_content")
    if chosen[:-1] != rejected[:-1]:
        raise InvalidRow("prompt_mismatch")
    if chosen[:-1]:
        prompt: Any = prompt_text(chosen[:-1])
    elif isinstance(record.get("prompt"), list):
        prompt = prompt_text(split_system([message_turn(m) for m in record["prompt"]])[1])
    else:
        prompt = record.get("prompt")
    return {"prompt": prompt, "chosen": chosen[-1]["content"], "rejected": rejected[-1]["content"]}


FORMATS: dict[str, RowFormat] = {
    "canonical": canonical_layout,
    "openai": openai_layout,
    "sharegpt": sharegpt_layout,
    "preference": preference_layout,
    "llama_nemotron": llama_nemotron_layout,
    "nemotron_v1": nemotron_v1_layout,
}
"""Row layout name -> fn(record) -> canonical fields it derives (raises InvalidRow)."""


def register_format(name: str, layout: RowFormat) -> None:
    """Make `format: <name>` map each record with `layout(record) -> {canonical field: value}`."""
    FORMATS[name] = layout


def detect_format(record: Any, ignore: Collection[str] = ()) -> str:
    """The layout a record's keys suggest (keys in `ignore`, e.g. `columns` targets, do not count)."""
    if not isinstance(record, Mapping):
        return "canonical"
    keys = set(record) - set(ignore)
    if "messages" in keys:
        return "nemotron_v1" if "reasoning" in keys else "openai"
    if "conversations" in keys:
        return "sharegpt"
    if {"input", "output"} <= keys:
        return "llama_nemotron"
    if {"chosen", "rejected"} <= keys:
        return "preference"
    return "canonical"


def detect_layout(records: Iterable[Any], ignore: Collection[str] = ()) -> str:
    """The most common detected layout of `records` (ties: the first seen); `canonical` when none."""
    counts = Counter(detect_format(r, ignore) for r in records if isinstance(r, Mapping))
    return max(counts, key=counts.__getitem__) if counts else "canonical"


def mapped_record(
    layout: str, record: Any, names: Sequence[str], columns: Mapping[str, str] | None = None,
    per_row: bool = False, finish: Callable[[dict[str, Any]], Any] = lambda fields: fields,
) -> tuple[Any, str]:
    """`finish(canonical_record(...))` (`finish`: the row validator) and the layout that read the
    row. With `per_row` (a `format: auto` file), a row `layout` rejects is read in the layout its
    own keys name, when that is another one; its reason is then that layout's (the row is judged as
    what it is, not as a broken `layout` row)."""
    try:
        return finish(canonical_record(layout, record, names, columns)), layout
    except InvalidRow:
        own = detect_format(record, ignore=(columns or {}).values()) if per_row else layout
        if own in (layout, "canonical"):
            raise
    return finish(canonical_record(own, record, names, columns)), own


def canonical_record(
    layout: str, record: Any, names: Sequence[str], columns: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """`record` as {canonical field: raw value} for the fields `names`, ready for validation.

    Derived fields of the layout win; the rest are read by canonical name (or `columns`).
    """
    if not isinstance(record, Mapping):
        raise InvalidRow("not_an_object")
    columns = columns or {}
    derived = FORMATS[layout](record)
    if derived.get("tools") and "tools" not in names:
        raise InvalidRow("not_in_domain:tools")
    out = {name: record.get(columns.get(name, name)) for name in names}
    out.update({k: v for k, v in derived.items() if k in names})
    return out
