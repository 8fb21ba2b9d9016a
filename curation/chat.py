"""ChatML formatting shared by curation, rewards and the trainer (docs/cascade_rl.md#chat-template-and-reasoning-modes).

One renderer for every producer of model input: SFT rows are rendered here, the trainer
renders RL prompts with `prompt_messages` + `render_messages`, and the tokenizer's chat
template (`CHAT_TEMPLATE`) reproduces `render_messages` exactly (tested), so the text a
model is trained on and the text it is prompted with cannot drift apart.

Conventions (Cascade RL's unified model):
- `<|im_start|>role\\ncontent<|im_end|>\\n` per message; the default system prompt is
  `DEFAULT_SYSTEM`.
- The reasoning mode is chosen per user turn: ` /think` or ` /no_think` is appended.
- Thinking responses are `<think>…</think>` + answer (exactly one block); non-thinking
  responses contain no think block at all: the assistant turn after a /no_think user turn is
  rendered with an empty think block first (`NO_THINK_PREFILL`, as hybrid reasoning models
  do), in SFT text and in every generation prompt (RL rollouts, evals, teacher sampling), so
  the model answers after it and the response itself never holds one.
- Tools are declared in the system prompt inside `<tools></tools>`, one JSON signature per
  line; calls are `<tool_call>{"name": …, "arguments": {…}}</tool_call>`.
- Multi-turn: a canonical `prompt` may be a JSON list of `{"role", "content"}` turns ending
  with a user turn, or with a `tool` turn (a tool result the final response answers);
  earlier assistant turns keep only their final answer and stay assistant messages, so SFT
  trains on every assistant turn. A row's own `system` prompt (chat and tool domains)
  replaces the default one; the tools block is still appended.

Row accounting of `sft_rows`: the unit is a *candidate response* — each non-null
think/no-think response of an input row is one candidate, and a row with none counts as
one candidate dropped as `no_response`. Every candidate is either an output row or counted
in `dropped`, so `candidates = rows_out + Σ dropped`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Iterable, Sequence

import pyarrow as pa

from curation.schemas import SFT_SCHEMA
from spec.train import DEFAULT_SYSTEM

MODES = ("think", "no_think")
MODE_SUFFIX = {"think": " /think", "no_think": " /no_think"}
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

# Jinja chat template equal to `render_messages` (transformers renders with
# trim_blocks/lstrip_blocks; the template is written so those flags do not matter).
# An assistant turn answering a /no_think user turn starts with an empty think block (as hybrid
# reasoning models do): the generation prompt pre-fills it, so a /no_think response never holds one.
NO_THINK_PREFILL = THINK_OPEN + "\n\n" + THINK_CLOSE + "\n\n"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% set prev = messages[loop.index0 - 1] if loop.index0 > 0 else none %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['role'] == 'assistant' and prev and prev['role'] == 'user' "
    "and prev['content'].endswith(' /no_think') and '<think>' not in message['content'] %}"
    "{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{{ message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if messages and messages[-1]['role'] == 'user' and messages[-1]['content'].endswith(' /no_think') %}"
    "{{ '<think>\n\n</think>\n\n' }}{% endif %}{% endif %}"
)


def final_text(completion: str) -> str:
    """The part of a completion that is scored: the text after the last `</think>`.

    >>> final_text("<think>2+2 is 4</think>The answer is \\\\boxed{4}")
    'The answer is \\\\boxed{4}'
    >>> final_text("no reasoning block")
    'no reasoning block'
    """
    idx = completion.rfind(THINK_CLOSE)
    return completion[idx + len(THINK_CLOSE):].strip() if idx >= 0 else completion.strip()


Message = dict[str, str]


def _prefilled(messages: Sequence[Message], i: int) -> bool:
    """Whether the assistant turn at `i` (or the generation prompt, i == len) starts with the empty
    think block: it answers a /no_think user turn and has no think block of its own."""
    prev = messages[i - 1] if i > 0 else None
    if prev is None or prev["role"] != "user" or not prev["content"].endswith(MODE_SUFFIX["no_think"]):
        return False
    return i == len(messages) or THINK_OPEN not in messages[i]["content"]


def render_messages(messages: Sequence[Message], add_generation_prompt: bool = False) -> str:
    """ChatML text of `messages`; with `add_generation_prompt` an open assistant turn follows.

    An assistant turn answering a `/no_think` user turn (and the open turn after one) starts with
    the empty think block `NO_THINK_PREFILL`, so /no_think generation continues after it.

    >>> render_messages([{"role": "user", "content": "hi /no_think"}], add_generation_prompt=True)
    '<|im_start|>user\\nhi /no_think<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'
    >>> render_messages([{"role": "user", "content": "hi /think"}], add_generation_prompt=True)
    '<|im_start|>user\\nhi /think<|im_end|>\\n<|im_start|>assistant\\n'
    """
    text = "".join(f"<|im_start|>{m['role']}\n{NO_THINK_PREFILL if m['role'] == 'assistant' and _prefilled(messages, i) else ''}"
                   f"{m['content']}<|im_end|>\n" for i, m in enumerate(messages))
    if add_generation_prompt:
        text += "<|im_start|>assistant\n" + (NO_THINK_PREFILL if _prefilled(messages, len(messages)) else "")
    return text


def tools_block(tools: Sequence[dict[str, Any]] | str) -> str:
    """System-prompt section declaring `tools` (a list of signatures or its JSON string)."""
    sigs = json.loads(tools) if isinstance(tools, str) else list(tools)
    lines = "\n".join(json.dumps(s, ensure_ascii=False) for s in sigs)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n"
        f"Function signatures are inside <tools></tools>:\n<tools>\n{lines}\n</tools>\n\n"
        "For each call, return a JSON object with the function name and arguments inside "
        '<tool_call></tool_call>:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def system_content(system: str = DEFAULT_SYSTEM, tools: Sequence[dict] | str | None = None) -> str:
    """The system message: the system prompt, plus the tools block when tools are given."""
    return f"{system}\n\n{tools_block(tools)}" if tools else system


def parse_conversation(prompt: str) -> list[Message] | None:
    """The turns of a multi-turn prompt (JSON list ending with a user or tool turn), else None."""
    text = prompt.lstrip()
    if not text.startswith("["):
        return None
    try:
        turns = json.loads(text)
    except ValueError:
        return None
    ok = (
        isinstance(turns, list) and turns
        and all(isinstance(t, dict) and isinstance(t.get("role"), str) and isinstance(t.get("content"), str) for t in turns)
        and turns[-1]["role"] in ("user", "tool")
    )
    return [{"role": t["role"], "content": t["content"]} for t in turns] if ok else None


def with_mode(content: str, mode: str) -> str:
    """Append the mode suffix to a user message (replacing one already there)."""
    if mode not in MODE_SUFFIX:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    for suffix in MODE_SUFFIX.values():
        content = content.removesuffix(suffix)
    return content + MODE_SUFFIX[mode]


def strip_think(text: str) -> str:
    """The final answer of an assistant message (text after the last `</think>`)."""
    return final_text(text)


def strip_think_history(messages: Sequence[Message]) -> list[Message]:
    """Earlier assistant turns keep only their final answer; the last message is untouched.

    >>> strip_think_history([{"role": "assistant", "content": "<think>x</think>4"},
    ...                      {"role": "user", "content": "again"}])[0]["content"]
    '4'
    """
    out = [dict(m) for m in messages]
    for m in out[:-1]:
        if m["role"] == "assistant":
            m["content"] = strip_think(m["content"])
    return out


def prompt_messages(
    prompt: str, mode: str, system: str = DEFAULT_SYSTEM, tools: Sequence[dict] | str | None = None
) -> list[Message]:
    """System + conversation turns for a prompt in `mode`; every user turn (only) gets the mode suffix.

    >>> [m["content"] for m in prompt_messages("2+2?", "think")]
    ['You are a helpful and harmless assistant.', '2+2? /think']
    """
    turns = parse_conversation(prompt) or [{"role": "user", "content": prompt}]
    turns = [t for t in turns if t["role"] != "system"]  # one system prompt, ours
    turns = [{**t, "content": with_mode(t["content"], mode)} if t["role"] == "user" else t for t in turns]
    return [{"role": "system", "content": system_content(system, tools)}] + strip_think_history(turns)


def render_prompt(prompt: str, mode: str, system: str = DEFAULT_SYSTEM, tools: Sequence[dict] | str | None = None) -> str:
    """The generation prompt the policy sees (what the trainer feeds at RL time)."""
    return render_messages(prompt_messages(prompt, mode, system, tools), add_generation_prompt=True)


def response_problem(response: str, mode: str) -> str | None:
    """Why a response cannot be an SFT target in `mode`, or None when it is well-formed."""
    if mode == "think":
        body = response.lstrip()
        if response.count(THINK_OPEN) != 1 or response.count(THINK_CLOSE) != 1:
            return "bad_think_block"
        if not body.startswith(THINK_OPEN) or body.index(THINK_CLOSE) < body.index(THINK_OPEN):
            return "bad_think_block"
    elif THINK_OPEN in response or THINK_CLOSE in response:
        return "think_in_no_think"
    return None if strip_think(response) else "empty_answer"


def tool_call_problem(response: str, tools: Sequence[dict] | str) -> str | None:
    """`bad_tool_call` when a `<tool_call>` block is not {"name", "arguments"} of a declared tool."""
    sigs = json.loads(tools) if isinstance(tools, str) else list(tools)
    names = {(s.get("function") or s).get("name") for s in sigs if isinstance(s, dict)}
    if response.count("<tool_call>") != response.count("</tool_call>"):
        return "bad_tool_call"
    for block in TOOL_CALL_RE.findall(final_text(response)):
        try:
            call = json.loads(block)
        except ValueError:
            return "bad_tool_call"
        if not isinstance(call, dict) or call.get("name") not in names or not isinstance(call.get("arguments"), dict):
            return "bad_tool_call"
    return None


_BOXED = "\\boxed{"
_ANSWER_RE = re.compile(r"answer(?:\s+is)?\s*[:=]?\s*\**\(?([A-Za-z0-9.\-+/]+)", re.IGNORECASE)


def extract_final_answer(response: str) -> str | None:
    """The stated answer of a response: last `\\boxed{…}`, else the last 'answer is X'."""
    text = final_text(response)
    start = text.rfind(_BOXED)
    if start >= 0:
        depth, i = 1, start + len(_BOXED)
        for j in range(i, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[i:j].strip()
    found = _ANSWER_RE.findall(text)
    return found[-1].rstrip(".") if found else None


def _norm_answer(value: str) -> str:
    return re.sub(r"[\s$()*]|\\text\{|\}", "", value).rstrip(".").lower()


def answers_agree(stated: str, truth: str) -> bool:
    """Same answer up to spacing, case, `$`, parentheses and float tolerance.

    >>> answers_agree("(B)", "b"), answers_agree("9.80", "9.8"), answers_agree("4", "5")
    (True, True, False)
    """
    a, b = _norm_answer(stated), _norm_answer(truth)
    if a == b:
        return True
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)
    except ValueError:
        return False


# Domains whose rows carry a ground truth responses must agree with, and its column.
GROUND_TRUTH_COLUMN = {"science": "answer", "chat": "ground_truth"}


def _candidate(row: dict[str, Any], domain: str, mode: str, response: str, system: str) -> tuple[dict | None, str | None]:
    problem = response_problem(response, mode)
    if problem is None and domain == "tool" and row.get("tools"):
        problem = tool_call_problem(response, row["tools"])
    truth = row.get(GROUND_TRUTH_COLUMN.get(domain, ""))
    if problem is None and truth:
        stated = extract_final_answer(response)
        if stated is None:
            problem = "no_final_answer"
        elif not answers_agree(stated, truth):
            problem = "disagrees_with_ground_truth"
    if problem:
        return None, problem
    system = row.get("system") or system  # the row's own system prompt wins
    messages = prompt_messages(row["prompt"], mode, system, row.get("tools") if domain == "tool" else None)
    messages.append({"role": "assistant", "content": response})
    return {
        "row_id": f"{row['row_id']}-{mode}",
        "source": row["source"],
        "domain": domain,
        "mode": mode,
        "messages": json.dumps(messages, ensure_ascii=False),
        "text": render_messages(messages),
    }, None


def sft_rows(
    rows: pa.Table | Iterable[dict[str, Any]],
    domain: str,
    system: str = DEFAULT_SYSTEM,
    modes: Sequence[str] = MODES,
) -> tuple[pa.Table, dict[str, int]]:
    """Canonical rows of `domain` -> SFT rows (SFT_SCHEMA) and dropped {reason: count}.

    Each present `think_response` / `no_think_response` (for modes in `modes`) becomes one
    row; a row's `system` column, when set, replaces `system`. Drop reasons: `no_response`,
    `bad_think_block`, `think_in_no_think`, `empty_answer`, `bad_tool_call`, `no_final_answer`,
    `disagrees_with_ground_truth`.
    """
    records = rows.to_pylist() if isinstance(rows, pa.Table) else list(rows)
    out: list[dict[str, Any]] = []
    dropped: dict[str, int] = {}
    for row in records:
        responses = [(m, row.get(f"{m}_response")) for m in modes]
        responses = [(m, r) for m, r in responses if r]
        if not responses:
            dropped["no_response"] = dropped.get("no_response", 0) + 1
        for mode, response in responses:
            kept, reason = _candidate(row, domain, mode, response, system)
            if kept:
                out.append(kept)
            else:
                dropped[reason] = dropped.get(reason, 0) + 1
    return pa.Table.from_pylist(out, schema=SFT_SCHEMA), dropped
