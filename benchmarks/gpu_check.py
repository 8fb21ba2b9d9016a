"""GPU check (issue 18, part 5): vLLM rollouts with weight sync, DeepSpeed ZeRO-2 GRPO, TRL + vLLM.

Given one CUDA GPU and the [gpu] extra (vllm; deepspeed and trl are in the default / [trl]
installs), it runs three parts, each in a fresh process so that one part's GPU memory never
counts against the next, and aims to finish within 8 minutes:

1. `engine`: colocated vLLM (trainer.rollout_vllm.VLLMRolloutEngine, fp32) on SmolLM2-135M:
   rollout tokens/s on prompts x G, then a weight sync: the HF model on the GPU is perturbed,
   pushed (`reload_weights` + prefix-cache reset), and vLLM's greedy log-probs must equal the
   perturbed model's (and differ from the original's);
2. `ours`: `--steps` GRPO steps of our stage, backend deepspeed (ZeRO-2, one rank under
   torchrun), rollout_engine=vllm colocated, weights pushed after every update;
3. `trl`: TRL 1.16's GRPOTrainer on the same settings (trainer.backends.trl_adapter's mapping of
   the same GRPOConfig) with `use_vllm=True, vllm_mode="colocate"` and the same
   gpu_memory_utilization.
It prints per step rollout tokens/s, step time and MFU, then the ratio of our median step time
(and tokens/s) to TRL's. MFU = 8 * N * T / (step time * peak), N the parameter count, T the
prompt + completion tokens of the step's prompts x G rollouts (2N FLOPs per token to sample,
6N to train: the step's nominal work, the same numerator for both), peak the GPU's dense bf16
FLOP/s (table below, or --peak-tflops). The report goes to OUT/gpu_check.json.

Without a GPU or vllm it stops at once with exit code 2 saying what is missing; `--dry-run`
checks everything that needs no GPU (imports, both configs, TRL's vLLM settings) and exits 0.

    pip install -e '.[gpu,trl]'   # vllm brings its own CUDA torch
    python benchmarks/gpu_check.py [--steps 4] [--prompts 8] [--generations 8] [--max-new-tokens 256]
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
MARK = "GPU_CHECK_JSON "
BUDGET_S = 480
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "GH200": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0,
               "A10": 125.0, "4090": 165.0}
"""Dense bf16 tensor-core TFLOP/s by GPU name (SXM parts; PCIe H100 is ~756: pass --peak-tflops)."""


def require_gpu() -> str | None:
    """Why this machine cannot run the check (None when it can)."""
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU visible (torch.cuda.is_available() is False)"
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed: pip install -e '.[gpu,trl]'"
    if importlib.util.find_spec("trl") is None:
        return "trl is not installed: pip install -e '.[trl]'"
    return None


def write_prompts(path: Path, n: int, seed: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from curation.schemas import RL_SCHEMA

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        rows.append({"row_id": f"g{i}", "source": "gpu_check", "domain": "math", "mode": "think",
                     "prompt": f"What is {a} plus {b}? Put the final answer in \\boxed{{}}.", "answer": str(a + b)})
    pq.write_table(pa.Table.from_pylist(rows, schema=RL_SCHEMA), path)


def grpo_config(args: argparse.Namespace, backend: str, engine: str, out: Path) -> object:
    """The one GRPOConfig both GRPO parts run (they differ in backend and rollout engine only)."""
    from trainer.config import GRPOConfig
    from trainer.models import ensure_base_model

    extra = {"deepspeed": {"zero_stage": 2, "num_processes": 1}} if backend == "deepspeed" else {}
    return GRPOConfig(
        policy=str(args.policy or ensure_base_model()), dataset=str(out / "prompts.parquet"),
        output_dir=str(out / f"{backend}_{time.strftime('%Y%m%d-%H%M%S')}"), rewards=["math"], backend=backend,
        max_steps=args.steps, prompts_per_step=args.prompts, num_generations=args.generations,
        max_new_tokens=args.max_new_tokens, learning_rate=2e-6, temperature=1.0, seed=args.seed,
        rollout_engine=engine, vllm={"gpu_memory_utilization": args.gpu_memory_utilization},
        deterministic=False, tensorboard=False, reward_cache="off", **extra)


def trl_vllm_args(config: object, work_dir: str, gpu_memory_utilization: float, use_cpu: bool = False) -> object:
    """TRL's GRPOConfig for `config` (trainer.backends.trl_adapter.trl_args) with colocated vLLM on."""
    from trainer.backends.trl_adapter import trl_args

    args = trl_args(config, work_dir, use_cpu)
    args.use_vllm, args.vllm_mode = True, "colocate"
    args.vllm_gpu_memory_utilization = gpu_memory_utilization
    return args


def prompt_tokens(config: object) -> float:
    """Mean rendered prompt length in tokens (for the MFU numerator)."""
    from transformers import AutoTokenizer

    from trainer.prompt_set import load_prompt_set

    ids = load_prompt_set(config, AutoTokenizer.from_pretrained(config.policy)).token_ids
    return sum(len(x) for x in ids) / max(1, len(ids))


def part_engine(args: argparse.Namespace, out: Path) -> dict:
    """Colocated vLLM: rollout tokens/s, then a weight sync checked against the HF model's log-probs."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.models import ensure_base_model
    from trainer.rollout_vllm import VLLMRolloutEngine

    policy = str(args.policy or ensure_base_model())
    tok = AutoTokenizer.from_pretrained(policy)
    engine = VLLMRolloutEngine(policy, tok, {"gpu_memory_utilization": args.gpu_memory_utilization,
                                             "dtype": "float32"}, seed=args.seed)
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"What is {i} plus {2 * i}?"}],
                                       add_generation_prompt=True, tokenize=True) for i in range(args.prompts)]
    prompts = [list(p["input_ids"]) if isinstance(p, dict) else list(p) for p in prompts]
    engine.generate(prompts[:1], 1, 8, 1.0, seed=0)  # warm-up
    t0 = time.perf_counter()
    groups = engine.generate(prompts, args.generations, args.max_new_tokens, 1.0, seed=1)
    gen_s = time.perf_counter() - t0
    tokens = sum(len(r.token_ids) for g in groups for r in g)
    model = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32).cuda().eval()

    def hf_logprobs(prompt: list[int], completion: list[int]) -> list[float]:
        ids = torch.tensor([prompt + completion], device="cuda")
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1:-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt):, None])[:, 0].tolist()

    original = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "mlp" in name:
                p.mul_(1.2)
    t0 = time.perf_counter()
    engine.sync_weights(model)
    sync_s = time.perf_counter() - t0
    after = [(p, r) for p, (r,) in zip(prompts[:2], engine.generate(prompts[:2], 1, 16, 0.0, return_logprobs=True))]
    pushed = [hf_logprobs(p, r.token_ids) for p, r in after]
    model.load_state_dict(original)  # the same completions under the weights vLLM had before the push
    before = [hf_logprobs(p, r.token_ids) for p, r in after]
    diff_new = max(abs(a - b) for (_, r), ref in zip(after, pushed) for a, b in zip(r.logprobs, ref))
    diff_old = max(abs(a - b) for (_, r), ref in zip(after, before) for a, b in zip(r.logprobs, ref))
    engine.close()
    return {"rollout_tokens": tokens, "rollout_s": gen_s, "rollout_tokens_per_s": tokens / gen_s, "sync_s": sync_s,
            "logprob_diff_vs_pushed": diff_new, "logprob_diff_vs_original": diff_old,
            "sync_ok": diff_new < 1e-2 and diff_old > 5 * diff_new}


def _steps(rows: list[dict], config: object, n_params: int, prompt_len: float, peak: float, trl: bool) -> list[dict]:
    rollouts = config.prompts_per_step * config.num_generations
    steps = []
    for r in rows:
        completion = r.get("completion_len_mean", 0.0)
        step_s = r.get("time_step_s") or float("nan")
        gen_s = r.get("time_generation_s")
        tokens = completion * rollouts
        flops = 8 * n_params * rollouts * (prompt_len + completion)
        steps.append({"step": r["step"], "step_s": step_s, "rollout_s": gen_s,
                      "rollout_tokens_per_s": tokens / gen_s if gen_s else None,
                      "tokens_per_s": tokens / step_s, "mfu": flops / (step_s * peak * 1e12),
                      "reward_mean": r.get("reward_mean"), "source": "trl" if trl else "ours"})
    return steps


def part_grpo(args: argparse.Namespace, out: Path, which: str) -> dict:
    """`ours` (deepspeed ZeRO-2 + colocated vLLM) or `trl` (TRL GRPOTrainer + colocated vLLM)."""
    import pyarrow.parquet as pq
    import torch

    peak = args.peak_tflops or next((v for k, v in PEAK_TFLOPS.items() if k in torch.cuda.get_device_name(0)), 0.0)
    if which == "ours":
        from trainer.stage import run_stage

        config = grpo_config(args, "deepspeed", "vllm", out)
        t0 = time.perf_counter()
        result = run_stage(config)
        rows = pq.read_table(result.metrics_path).to_pylist()
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import GRPOTrainer

        from trainer.backends.trl_adapter import TRLReward, build_dataset, metrics_rows
        from trainer.scoring import load_rewards

        config = grpo_config(args, "trl", "hf", out)
        for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                           "MASTER_PORT": str(29500 + os.getpid() % 1000)}.items():
            os.environ.setdefault(key, value)  # TRL's colocated vLLM uses the external launcher
        tok = AutoTokenizer.from_pretrained(config.policy)
        dataset, _ = build_dataset(config, tok)
        rewards, _, _ = load_rewards(config.rewards)
        trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(config.policy, dtype=torch.float32),
                              reward_funcs=[TRLReward(r, config.reward_timeout_s) for r in rewards],
                              args=trl_vllm_args(config, str(out / "trl_work"), args.gpu_memory_utilization),
                              train_dataset=dataset, processing_class=tok)
        t0 = time.perf_counter()
        trainer.train()
        rows = metrics_rows(trainer.state.log_history, [r.name for r in rewards],
                            config.prompts_per_step * config.num_generations)
    wall = time.perf_counter() - t0
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        n_params = sum(p.numel() for p in AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config.policy)).parameters())
    return {"part": which, "wall_s": wall, "peak_tflops": peak, "params": n_params,
            "steps": _steps(rows, config, n_params, prompt_tokens(config), peak or float("nan"), which == "trl")}


def _median(steps: list[dict], key: str) -> float:
    timed = [s[key] for s in (steps[1:] if len(steps) > 1 else steps) if s.get(key) is not None]
    return statistics.median(timed) if timed else float("nan")


def dry_run(args: argparse.Namespace, out: Path) -> int:
    """Everything that needs no GPU: imports, both configs, TRL's colocated-vLLM settings."""
    import importlib.util

    print(f"gpu_check --dry-run: GPU/vllm/trl status: {require_gpu() or 'ready'}")
    write_prompts(out / "prompts.parquet", args.prompts * args.steps, seed=args.seed)
    engine = "vllm" if importlib.util.find_spec("vllm") else "auto"  # `vllm` is refused at load without it
    ours = grpo_config(args, "deepspeed", engine, out)
    trl = grpo_config(args, "trl", "hf", out)
    plan = {"ours": {"backend": ours.backend, "zero_stage": ours.deepspeed.zero_stage, "rollout_engine": engine,
                     "vllm": ours.vllm}, "steps": args.steps, "prompts": args.prompts,
            "generations": args.generations, "max_new_tokens": args.max_new_tokens,
            "prompt_tokens_mean": round(prompt_tokens(ours), 1)}
    if importlib.util.find_spec("trl") is not None:
        targs = trl_vllm_args(trl, str(out / "trl_work"), args.gpu_memory_utilization, use_cpu=True)
        plan["trl"] = {"use_vllm": targs.use_vllm, "vllm_mode": targs.vllm_mode,
                       "vllm_gpu_memory_utilization": targs.vllm_gpu_memory_utilization,
                       "per_device_train_batch_size": targs.per_device_train_batch_size,
                       "num_generations": targs.num_generations, "max_completion_length": targs.max_completion_length}
    print(MARK + json.dumps(plan), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="GPU check: vLLM rollouts + weight sync, DeepSpeed ZeRO-2 GRPO, TRL + vLLM")
    ap.add_argument("--steps", type=int, default=4, help="GRPO steps per trainer (the first is not timed)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    ap.add_argument("--peak-tflops", type=float, default=None, help="the GPU's dense bf16 TFLOP/s (default: by name)")
    ap.add_argument("--policy", default=None, help="model folder (default: SmolLM2-135M-Instruct, ensure_base_model)")
    ap.add_argument("--dry-run", action="store_true", help="check what needs no GPU and exit")
    ap.add_argument("--only", choices=["engine", "ours", "trl"], help="internal: run one part and print JSON")
    ap.add_argument("--out", default=os.path.join(os.environ.get("CASCADE_HOME", ".cascade"), "gpu_check"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        return dry_run(args, out)
    problem = require_gpu()
    if problem:
        print(f"gpu_check: cannot run: {problem}", file=sys.stderr)
        return 2
    if args.only:
        result = part_engine(args, out) if args.only == "engine" else part_grpo(args, out, args.only)
        print(MARK + json.dumps(result, default=str), flush=True)
        return 0

    import torch

    start = time.perf_counter()
    device = torch.cuda.get_device_name(0)
    print(f"device: {device}; {args.prompts} prompts x G={args.generations} x {args.max_new_tokens} new tokens, "
          f"{args.steps} steps, gpu_memory_utilization {args.gpu_memory_utilization}", flush=True)
    write_prompts(out / "prompts.parquet", args.prompts * args.steps, seed=args.seed)
    from trainer.models import ensure_base_model

    if not args.policy:
        ensure_base_model()  # converted once, before the parts
    report: dict = {"device": device, "settings": vars(args)}
    flags = ["--steps", str(args.steps), "--prompts", str(args.prompts), "--generations", str(args.generations),
             "--max-new-tokens", str(args.max_new_tokens), "--seed", str(args.seed), "--out", str(out),
             "--gpu-memory-utilization", str(args.gpu_memory_utilization)]
    flags += ["--peak-tflops", str(args.peak_tflops)] if args.peak_tflops else []
    flags += ["--policy", str(args.policy)] if args.policy else []
    for part in ("engine", "ours", "trl"):
        left = BUDGET_S + 60 - (time.perf_counter() - start)
        try:
            proc = subprocess.run([sys.executable, __file__, "--only", part, *flags], capture_output=True, text=True,
                                  cwd=ROOT, timeout=max(left, 30))
        except subprocess.TimeoutExpired:
            report[part] = {"error": "timed out"}
            print(f"[{part}] timed out", flush=True)
            continue
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)), None)
        if proc.returncode != 0 or line is None:
            report[part] = {"error": f"exit {proc.returncode}", "log": (proc.stdout + proc.stderr)[-4000:]}
            print(f"[{part}] FAILED (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}", flush=True)
            continue
        report[part] = json.loads(line.removeprefix(MARK))
        if part == "engine":
            e = report[part]
            print(f"[engine] vLLM colocated: {e['rollout_tokens']} tokens in {e['rollout_s']:.2f} s -> "
                  f"{e['rollout_tokens_per_s']:.0f} rollout tokens/s; weight sync {e['sync_s']:.2f} s, log-prob diff "
                  f"vs pushed {e['logprob_diff_vs_pushed']:.2e}, vs original {e['logprob_diff_vs_original']:.2e}: "
                  f"{'ok' if e['sync_ok'] else 'FAILED'}", flush=True)
        else:
            for s in report[part]["steps"]:
                roll = f"{s['rollout_tokens_per_s']:.0f}" if s["rollout_tokens_per_s"] else "n/a"
                print(f"[{part}] step {s['step']}: {s['step_s']:.2f} s, rollout tokens/s {roll}, "
                      f"tokens/s {s['tokens_per_s']:.0f}, MFU {100 * s['mfu']:.2f}%, reward {s['reward_mean']}", flush=True)
    ours, trl = report.get("ours", {}), report.get("trl", {})
    if "steps" in ours and "steps" in trl:
        ratio = _median(ours["steps"], "step_s") / _median(trl["steps"], "step_s")
        report["ratio_step_time_ours_over_trl"] = ratio
        print(f"median step: ours {_median(ours['steps'], 'step_s'):.2f} s (MFU {100 * _median(ours['steps'], 'mfu'):.2f}%) "
              f"vs TRL {_median(trl['steps'], 'step_s'):.2f} s (MFU {100 * _median(trl['steps'], 'mfu'):.2f}%): "
              f"ratio ours/TRL = {ratio:.2f} ({1 / ratio:.2f}x {'faster' if ratio < 1 else 'slower'})")
    wall = time.perf_counter() - start
    report["wall_s"] = wall
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    ok = all("error" not in report.get(p, {"error": 1}) for p in ("engine", "ours", "trl"))
    ok = ok and report["engine"]["sync_ok"]
    print(f"{'ok' if ok else 'FAILED'}: {wall:.0f} s ({'within' if wall <= BUDGET_S else 'OVER'} the "
          f"{BUDGET_S // 60}-minute budget); report {out / 'gpu_check.json'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
