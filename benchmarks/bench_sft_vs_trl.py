"""SFT throughput (tokens/s): our SFT trainer vs TRL 1.16's SFTTrainer on the same data, in one run.

Same model (SmolLM2-135M-Instruct), same rows (chat-formatted arithmetic explanations, SFT_SCHEMA),
same rendering (curation.chat ChatML), loss on assistant tokens only, best-fit-decreasing packing
into the same max_length, same batch size, learning rate, AdamW betas, fp32. TRL gets the rows as
prompt/completion pairs (its completion-only loss = our assistant-only loss for one-turn rows).
Each trainer runs in a fresh process; tokens/s = packed input tokens per optimizer step / step
time, median over the steps after the first.

Usage: nice python benchmarks/bench_sft_vs_trl.py [--steps 6] [--out .cascade/bench/sft]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def sft_rows(n: int, seed: int) -> list[dict]:
    """One-turn /think rows with a short worked explanation (a few dozen to ~150 tokens each)."""
    from curation.chat import prompt_messages, render_messages

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(2, 9)
        steps = " ".join(f"Step {k + 1}: {a} + {k * c} = {a + k * c}." for k in range(rng.randint(1, 8)))
        answer = f"<think>We add {a} and {b}. {steps} Then {a} + {b} = {a + b}.</think>The answer is \\boxed{{{a + b}}}."
        messages = prompt_messages(f"Explain how to compute {a} plus {b}.", "think") + [
            {"role": "assistant", "content": answer}]
        rows.append({"row_id": f"s{i}", "source": "bench", "domain": "math", "mode": "think",
                     "messages": json.dumps(messages), "text": render_messages(messages)})
    return rows


def run_ours(args: argparse.Namespace, data: Path, out: Path) -> dict:
    import pyarrow.parquet as pq

    from trainer.config import SFTConfig
    from trainer.models import ensure_base_model
    from trainer.stage import run_stage

    config = SFTConfig(policy=str(ensure_base_model()), dataset=str(data), output_dir=str(out),
                       max_steps=args.steps, batch_size=args.batch_size, max_length=args.max_length, packing=True,
                       learning_rate=1e-5, warmup_ratio=0.0, lr_schedule="constant", seed=args.seed,
                       tensorboard=False)
    rows = pq.read_table(run_stage(config).metrics_path).to_pylist()[1:]
    return {"tokens": [r["tokens"] for r in rows], "step_times_s": [r["step_time_s"] for r in rows]}


def run_trl(args: argparse.Namespace, data: Path, out: Path) -> dict:
    import pyarrow.parquet as pq
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from curation.chat import render_messages
    from trainer.models import ensure_base_model

    policy = ensure_base_model()
    prompts, completions = [], []
    for raw in pq.read_table(data).column("messages").to_pylist():
        messages = json.loads(raw)
        prompts.append(render_messages(messages[:-1], add_generation_prompt=True))
        completions.append(messages[-1]["content"] + "<|im_end|>\n")
    dataset = Dataset.from_dict({"prompt": prompts, "completion": completions})

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._t = 0.0

        def on_step_begin(self, *a, **k):
            self._t = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self._t)

    timer = StepTimer()
    tokenizer = AutoTokenizer.from_pretrained(policy)
    trl_args = SFTConfig(output_dir=str(out), max_steps=args.steps, per_device_train_batch_size=args.batch_size,
                         max_length=args.max_length, packing=True, packing_strategy="bfd", completion_only_loss=True,
                         learning_rate=1e-5, lr_scheduler_type="constant", adam_beta1=0.9, adam_beta2=0.95,
                         seed=args.seed, logging_steps=1, save_strategy="no", report_to="none", use_cpu=True,
                         bf16=False, activation_checkpointing=False, disable_tqdm=True, dataset_num_proc=None,
                         eos_token="<|im_end|>")
    model = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32)
    trainer = SFTTrainer(model=model, args=trl_args, train_dataset=dataset, processing_class=tokenizer,
                         callbacks=[timer])
    trainer.train()
    seen = [h["num_tokens"] for h in trainer.state.log_history if "num_tokens" in h and "loss" in h]
    per_step = [b - a for a, b in zip([0.0] + seen[:-1], seen)]
    return {"tokens": per_step[1:], "step_times_s": timer.times[1:]}


def summarise(name: str, raw: dict) -> dict:
    rates = [t / s for t, s in zip(raw["tokens"], raw["step_times_s"])]
    return {"trainer": name, "median_tokens_per_s": statistics.median(rates), **raw}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="SFT tokens/s: ours vs TRL SFTTrainer")
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per trainer (the first is not timed)")
    ap.add_argument("--rows", type=int, default=160)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2, help="alternating ours/trl rounds; the best round counts")
    ap.add_argument("--out", default=os.path.join(os.environ.get("CASCADE_HOME", ".cascade"), "bench", "sft_vs_trl"))
    ap.add_argument("--only", choices=["ours", "trl"], help="internal: run one trainer and print JSON")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "sft.parquet"
    if args.only:
        run_dir = out / f"{args.only}_{time.strftime('%Y%m%d-%H%M%S')}"
        raw = (run_ours if args.only == "ours" else run_trl)(args, data, run_dir)
        print("BENCH_JSON " + json.dumps(summarise(args.only, raw)), flush=True)
        return 0

    import pyarrow as pa
    import pyarrow.parquet as pq

    from curation.schemas import SFT_SCHEMA
    from trainer.models import ensure_base_model

    pq.write_table(pa.Table.from_pylist(sft_rows(args.rows, args.seed), schema=SFT_SCHEMA), data)
    ensure_base_model()
    results: dict[str, dict] = {}
    # Alternating rounds, best round per trainer (see bench_grpo_vs_trl.py for why).
    for who in [w for _ in range(args.rounds) for w in ("ours", "trl")]:
        cmd = [sys.executable, __file__, "--only", who, "--steps", str(args.steps), "--rows", str(args.rows),
               "--batch-size", str(args.batch_size), "--max-length", str(args.max_length), "--seed", str(args.seed),
               "--out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
        if proc.returncode != 0 or line is None:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
            raise SystemExit(f"{who} run failed (exit {proc.returncode})")
        run = json.loads(line.removeprefix("BENCH_JSON "))
        print(f"  round: {who:<5} median {run['median_tokens_per_s']:.1f} tokens/s", flush=True)
        if who not in results or run["median_tokens_per_s"] > results[who]["median_tokens_per_s"]:
            results[who] = run
    ratio = results["ours"]["median_tokens_per_s"] / results["trl"]["median_tokens_per_s"]
    print(f"SFT, SmolLM2-135M, batch {args.batch_size} x {args.max_length} packed tokens, {os.cpu_count()} CPU cores")
    for r in results.values():
        print(f"  {r['trainer']:<5} median {r['median_tokens_per_s']:8.1f} tokens/s  "
              f"(step times {', '.join(f'{t:.1f}' for t in r['step_times_s'])} s)")
    print(f"  throughput ratio ours/TRL = {ratio:.2f}x")
    (out / "result.json").write_text(json.dumps({"ratio": ratio, **results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
