"""Chat turns in the field's row layouts -> canonical conversation fields.

What: the pieces every message layout of curation/formats.py shares. One turn becomes
`{"role", "content"}`: text parts are joined, assistant tool calls are rendered as
`<tool_call>{"name": …, "arguments": {…}}</tool_call>` blocks and a separate
`reasoning_content` becomes a leading `<think>…</think>` (the conventions of
curation/chat.py). Tool signatures become the canonical `tools` JSON list. A finished
conversation becomes the canonical `system`, `prompt` (one user turn: its text; more: the
JSON list of turns, ending with a user or tool turn) and exactly one of `think_response` /
`no_think_response` (the final assistant turn).

Why one module: the layouts differ only in key names and role spellings; the rules that
decide whether a conversation is trainable (a final assistant turn, a user turn before it,
well-formed reasoning, parseable tool calls) are written once, so every layout quarantines a
broken row for the same named reason.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

from curation.schemas import InvalidRow

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ROLES = ("system", "user", "assistant", "tool")
# System prompts that only switch the reasoning mode (Nemotron); not a real system prompt.
MODE_CONTROL = re.compile(r"\s*(detailed thinking (on|off)|/think|/no_think)\s*", re.IGNORECASE)

Turn = dict[str, str]


def text_content(content: Any) -> str:
    """A message's text: a string, a list of `{"type": "text", "text"}` parts (joined), or null ("")."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise InvalidRow("non_text_content")
        return "\n".join(parts)
    raise InvalidRow("wrong_type:content")


def tool_call_block(call: Any) -> str:
    """`<tool_call>{"name", "arguments"}</tool_call>` of an OpenAI call ({function: {...}}) or a bare one."""
    fn = call.get("function") if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping) else call
    if not isinstance(fn, Mapping):
        raise InvalidRow("bad_tool_call")
    name, args = fn.get("name"), fn.get("arguments")
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            raise InvalidRow("bad_tool_call") from None
    if not isinstance(name, str) or not name.strip() or not isinstance(args, dict):
        raise InvalidRow("bad_tool_call")
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "</tool_call>"


def assistant_content(content: Any, tool_calls: Any = None, reasoning: Any = None) -> str:
    """Assistant text with `reasoning` folded in as a leading think block and calls appended."""
    text = text_content(content)
    if isinstance(reasoning, str) and reasoning.strip():
        if THINK_OPEN in text or THINK_CLOSE in text:
            raise InvalidRow("double_reasoning")
        text = f"{THINK_OPEN}{reasoning}{THINK_CLOSE}{text}"
    if tool_calls is None:
        return text
    if not isinstance(tool_calls, list):
        raise InvalidRow("not_a_list:tool_calls")
    blocks = [tool_call_block(c) for c in tool_calls]
    if not blocks:
        return text
    return text + ("\n" if text.strip() else "") + "\n".join(blocks)


def message_turn(message: Any, aliases: Mapping[str, str] | None = None) -> Turn:
    """One OpenAI-style message -> `{"role", "content"}` (roles renamed by `aliases` first)."""
    if not isinstance(message, Mapping):
        raise InvalidRow("bad_message")
    role = message.get("role")
    role = (aliases or {}).get(role, role) if isinstance(role, str) else role
    if role not in ROLES:
        raise InvalidRow(f"bad_role:{role}")
    if role == "assistant":
        content = assistant_content(message.get("content"), message.get("tool_calls"), message.get("reasoning_content"))
    else:
        content = text_content(message.get("content"))
    return {"role": role, "content": content}


def tools_json(value: Any) -> str | None:
    """Canonical `tools`: a JSON list of bare signatures (`{"type": "function", "function": s}` unwrapped)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise InvalidRow("bad_tools") from None
    if not isinstance(value, list):
        raise InvalidRow("bad_tools")
    sigs = []
    for tool in value:
        sig = tool.get("function") if isinstance(tool, Mapping) and isinstance(tool.get("function"), Mapping) else tool
        if not isinstance(sig, Mapping) or not isinstance(sig.get("name"), str):
            raise InvalidRow("bad_tools")
        sigs.append(dict(sig))
    return json.dumps(sigs, ensure_ascii=False) if sigs else None


def split_think(text: str) -> tuple[str | None, str]:
    """(reasoning or None, answer) of an assistant text; a think block must lead and be closed."""
    body = text.lstrip()
    if not body.startswith(THINK_OPEN):
        if THINK_OPEN in text or THINK_CLOSE in text:
            raise InvalidRow("misplaced_think")
        return None, text
    end = body.find(THINK_CLOSE)
    if end < 0:
        raise InvalidRow("unterminated_think")
    answer = body[end + len(THINK_CLOSE):]
    if THINK_OPEN in answer or THINK_CLOSE in answer:
        raise InvalidRow("extra_think_block")
    return body[len(THINK_OPEN):end], answer


def reasoning_flag(value: Any) -> str | None:
    """A layout's reasoning switch: "on" / "off" (bools and any case accepted), None when absent."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str) and value.strip().lower() in ("on", "off"):
        return value.strip().lower()
    raise InvalidRow("bad_reasoning_flag")


def response_columns(response: str, flag: str | None = None) -> dict[str, str | None]:
    """The final assistant text as `think_response` or `no_think_response`.

    flag None: a leading think block with reasoning means thinking; "on" requires one
    (`missing_think`, `empty_think`); "off" forbids one (`think_in_no_think`). An empty
    `<think></think>` prefix of a non-thinking answer is stripped.
    """
    has_tags = THINK_OPEN in response or THINK_CLOSE in response
    if flag == "off" and has_tags and not response.lstrip().startswith(THINK_OPEN):
        raise InvalidRow("think_in_no_think")
    thought, answer = split_think(response)
    if flag == "on" and thought is None:
        raise InvalidRow("missing_think")
    if flag == "on" and not thought.strip():
        raise InvalidRow("empty_think")
    if flag == "off" and thought is not None and thought.strip():
        raise InvalidRow("think_in_no_think")
    if not answer.strip():
        raise InvalidRow("empty_content")
    if thought is not None and thought.strip():
        return {"think_response": response.lstrip(), "no_think_response": None}
    return {"think_response": None, "no_think_response": answer.lstrip() if thought is not None else response}


def split_system(turns: Sequence[Turn], drop_mode_control: bool = False) -> tuple[str | None, list[Turn]]:
    """(system prompt or None, the other turns); system turns must lead, blank ones are dropped."""
    system: list[str] = []
    rest: list[Turn] = []
    for turn in turns:
        if turn["role"] != "system":
            rest.append(turn)
        elif rest:
            raise InvalidRow("misplaced_system_turn")
        elif turn["content"].strip() and not (drop_mode_control and MODE_CONTROL.fullmatch(turn["content"])):
            system.append(turn["content"])
    return ("\n\n".join(system) or None), rest


def prompt_text(history: Sequence[Turn]) -> str:
    """Canonical `prompt` of the turns before a response: one user turn's text, else the JSON turns.

    The turns need a user turn, must end with a user or tool turn, and user and assistant
    turns need text (assistant reasoning must be well-formed: it is stripped at render time).
    """
    if not any(t["role"] == "user" for t in history):
        raise InvalidRow("no_user_turn")
    if history[-1]["role"] == "assistant":
        raise InvalidRow("consecutive_assistant_turns")
    for turn in history:
        if turn["role"] == "assistant":
            split_think(turn["content"])
        if turn["role"] in ("user", "assistant") and not turn["content"].strip():
            raise InvalidRow("empty_content")
    if len(history) == 1:
        return history[0]["content"]
    return json.dumps([{"role": t["role"], "content": t["content"]} for t in history], ensure_ascii=False)


def conversation_fields(turns: Sequence[Turn], flag: str | None = None, drop_mode_control: bool = False) -> dict[str, Any]:
    """Canonical `system`, `prompt` and response columns of a conversation ending in an assistant turn."""
    system, body = split_system(turns, drop_mode_control)
    if not any(t["role"] == "assistant" for t in body):
        raise InvalidRow("no_assistant_turn")
    if body[-1]["role"] != "assistant":
        raise InvalidRow(f"ends_with:{body[-1]['role']}")
    return {"system": system, "prompt": prompt_text(body[:-1]), **response_columns(body[-1]["content"], flag)}
