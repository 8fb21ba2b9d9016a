"""GRPO step (the algorithm in plain words is in trainer/__init__.py).

Speed on CPU comes from doing no redundant work: sampling prefills each prompt once for its G
rollouts; no old-policy or reference forward by default (ratio 1, no KL); the training forward
skips rollouts whose loss weight is zero (zero advantage, filtered, overlong) since they cannot
move the weights, computes each prompt once for all its trained completions
(`build_group_batch`), and runs the LM head only on completion tokens.

The training log-probs are those of the step's sampling temperature (`target_logprobs(...,
temperature=)`, as verl and TRL compute them), so the update is on-policy for the distribution
that sampled; `rollout_logprob_diff_mean` / `_max` record how far they are from the sampler's
own log-probs on the trained tokens (before the update), which the `training_signal` check bounds.

Rewards are built by trainer.scoring and put behind the reward cache; the step calls each one's
`Reward.score` (keeping each RewardResult's reason); every rollout with its per-reward results is recorded in the checkpoint's audit table
(trainer.rollout_audit), and cache hits/misses per step go to the metrics.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from trainer.base import TrainerBase
from trainer.batching import build_group_batch, gap_metrics, sampler_gap, target_logprobs
from trainer.config import GRPOConfig
from trainer.prompt_set import load_prompt_set
from trainer.rollout import EngineRollouts, HFRolloutEngine, Rollout, resolve_rollout_engine, rollout_workers
from trainer.rollout_audit import RolloutAudit, reward_entry
from trainer.scoring import cache_counts, failed, load_rewards, scorers

__all__ = ["GRPOTrainer", "carries_signal", "group_advantages"]

_ZERO_STD = 1e-6  # below this a group's rewards count as equal (no signal)


def group_advantages(rewards: list[float], transform: str = "none", std_kind: str = "population") -> tuple[list[float], bool]:
    """(r - mean) / std within one group; all zeros when std is ~0. `std_kind`: `population`
    (divide by n) or `sample` (n - 1, torch.std's default, as verl and TRL compute it)."""
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1 if std_kind == "sample" and n > 1 else n))
    if std < _ZERO_STD:
        return [0.0] * n, True
    adv = [(r - mean) / std for r in rewards]
    return ([math.tanh(a) for a in adv] if transform == "tanh" else adv), False


def carries_signal(rollouts: list[Rollout], advantages: list[float], overlong_filtering: bool) -> bool:
    """Whether a group can move the weights: some rollout the loss keeps (not truncated under
    overlong filtering, not empty) has a non-zero advantage. A group whose reward differences sit
    only in truncated rollouts has none: it counts as no signal (dynamic filtering drops it and a
    refill replaces it) instead of taking a slot and training on nothing."""
    return any(a != 0.0 and r.token_ids and not (overlong_filtering and r.truncated)
               for r, a in zip(rollouts, advantages))


def _stats(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))

# What one step collects, per rank, before `_metrics` reduces it.
STEP_LISTS = ("time_generation_s", "time_reward_s", "groups", "zero_var", "rewards", "lengths", "truncated",
              "refill_rounds", "think", "uniform_prompts", "reward_cache_hits", "reward_cache_misses", "audit", "lp_gap")


class GRPOTrainer(TrainerBase[GRPOConfig]):
    """Group-relative policy optimisation: sample G rollouts per prompt, score them, one update."""

    algorithm = "grpo"
    progress_keys = ("reward_mean", "reward_std", "zero_var_frac", "completion_len_mean", "entropy", "grad_norm",
                     "time_generation_s", "time_training_s")

    def __init__(self, config: GRPOConfig, tokenizer: Any, world_size: int = 1, rank: int = 0):
        super().__init__(config, tokenizer, world_size=world_size, rank=rank)
        prompts = load_prompt_set(config, tokenizer)
        self.rows, self.prompt_ids, self.modes = prompts.rows, prompts.token_ids, prompts.modes
        self.row_ids = [str(i if r.get("row_id") is None else r["row_id"]) for i, r in enumerate(self.rows)]
        self.skipped_long = prompts.skipped_long
        self.rewards, self.weights, self._reward_records = load_rewards(config.rewards, config.reward_model)
        self.total_steps, self.warmup_steps = config.max_steps, config.warmup_steps
        self.order = prompts.order(config)
        self.engine: Any = None
        self.engine_name = "hf"  # the rollout engine in use (`auto` resolved), set by attach
        self.reference: Any = None
        self.audit: RolloutAudit | None = None
        self._scorers: list[Any] | None = None  # the rewards behind the reward cache, built on first use

    def attach(self, backend: Any) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.backend = backend
        cfg = self.config
        self.audit = RolloutAudit(cfg.output_dir, enabled=backend.is_main)
        self.engine_name, why = resolve_rollout_engine(cfg.rollout_engine, self.world_size)
        if self.engine_name == "vllm":
            from trainer.rollout_vllm import VLLMRolloutEngine

            self.engine = VLLMRolloutEngine(cfg.policy, self.tokenizer, cfg.vllm, seed=cfg.seed)
            self.engine.sync_weights(backend.model)  # a resumed model differs from cfg.policy
        elif (workers := rollout_workers(cfg.rollout_workers, self.world_size, backend.device)) > 1:
            from generation.hf_workers import HFWorkers

            self.engine_name, why = "hf_workers", f"{workers} CPU processes (rollout_workers)"  # fed weights after every update
            dtype = str(next(backend.model.parameters()).dtype).removeprefix("torch.")
            self.engine = EngineRollouts(HFWorkers(cfg.policy, workers, dtype=dtype, batch_size=cfg.rollout_batch_size,
                                                   draw="multinomial"), self.tokenizer)
            self.engine.sync_weights(backend.model)  # a resumed model differs from cfg.policy
        else:
            self.engine = HFRolloutEngine(backend.model, self.tokenizer, cfg.rollout_batch_size,
                                          synced=backend.synced_rollouts())
        if backend.is_main:
            print(f"[{self.algorithm}] rollout engine: {self.engine_name} ({why})", file=sys.stderr, flush=True)
        if cfg.kl_coef > 0:  # frozen copy of the stage's input policy
            self.reference = AutoModelForCausalLM.from_pretrained(cfg.policy, dtype=torch.float32).to(backend.device)
            self.reference.eval().requires_grad_(False)

    def close(self) -> None:
        """Stop the rollout engine's worker processes, when it has any."""
        if isinstance(self.engine, EngineRollouts):
            self.engine.close()
        self.engine = None

    def summary(self) -> dict[str, Any]:
        return {"prompts": len(self.rows), "skipped_long_prompts": self.skipped_long,
                "retired_prompts": len(self.order.retired), "rollout_engine": self.engine_name}

    def reward_records(self) -> list[dict[str, Any]]:
        return self._reward_records

    # -- one step ---------------------------------------------------------------------------

    def _sample(self, indices: list[int], step: int, round_: int, max_new: int, temp: float) -> list[list[Rollout]]:
        seed = (self.config.seed * 1_000_003 + step * 1009 + round_ * 101 + self.rank) % 2**63
        return self.engine.generate([self.prompt_ids[i] for i in indices], self.config.num_generations, max_new,
                                    temp, self.config.top_p, seed=seed, return_logprobs=True)

    def _score(self, indices: list[int], groups: list[list[Rollout]], metrics: dict[str, list],
               step: int, round_: int) -> list[list[float]]:
        """Weighted total reward per rollout; per-reward scores, failures, cache counts and the
        audit rows (trainer.rollout_audit.ROLLOUT_SCHEMA) go to `metrics`."""
        cfg, G = self.config, self.config.num_generations
        if self._scorers is None:
            self._scorers = scorers(self.rewards, cfg.reward_cache)
        prompts = [self.rows[i]["prompt"] for i in indices for _ in range(G)]
        texts = [r.text for g in groups for r in g]
        columns = {k: [self.rows[i].get(k) for i in indices for _ in range(G)]
                   for k in self.rows[0] if k != "prompt"}
        totals = [0.0] * len(texts)
        entries: list[list[dict[str, Any]]] = [[] for _ in texts]
        for spec, scorer, weight, record in zip(cfg.rewards, self._scorers, self.weights, self._reward_records):
            before = cache_counts(scorer)
            results = scorer.score(prompts, texts, timeout_s=cfg.reward_timeout_s, **columns)
            failures = failed(results)
            after = cache_counts(scorer)
            metrics["reward_cache_hits"].append(after[0] - before[0])
            metrics["reward_cache_misses"].append(after[1] - before[1])
            metrics.setdefault(f"reward/{spec.name}", []).extend(r.score for r in results if r.score is not None)
            metrics.setdefault(f"reward_failures/{spec.name}", []).append(failures)
            totals = [t + weight * (r.score or 0.0) for t, r in zip(totals, results)]
            for entry, r in zip(entries, results):
                entry.append(reward_entry(spec.name, record["version"], weight, r))
        flat = [(i, k, r) for i, g in zip(indices, groups) for k, r in enumerate(g)]
        metrics["audit"].extend(
            {"step": step, "round": round_, "prompt_id": self.row_ids[i], "mode": self.modes[i],
             "sample": k, "completion": r.text, "completion_tokens": len(r.token_ids), "truncated": r.truncated,
             "reward": total, "rewards": entry}
            for (i, k, r), total, entry in zip(flat, totals, entries))
        return [totals[k * G:(k + 1) * G] for k in range(len(indices))]

    def _record(self, step: int, rows: list[dict[str, Any]]) -> None:
        """Write this step's audit rows from every rank (main rank); merge the table after the last step."""
        parts = self.backend.gather_objects(rows)  # collective: every rank calls it
        if self.audit is not None and self.audit.enabled:
            self.audit.write_step(step, [row for part in parts for row in part])
            if step + 1 == self.total_steps:
                self.audit.finish()

    def _collect(self, step: int, max_new: int, temp: float, metrics: dict[str, list]) -> list[tuple[list[int], list[Rollout], list[float], list[float]]]:
        """Sample + score prompts for this step: [(prompt ids, rollouts, rewards, advantages)]."""
        cfg, backend = self.config, self.backend
        kept: list[tuple] = []
        need = cfg.prompts_per_step
        refilling = cfg.dynamic_filtering and cfg.refill
        rounds = 1 + (cfg.max_refill_rounds if refilling else 0)
        for round_ in range(rounds):
            picked = self.order.take(max(need, cfg.refill_prompts or 0) if refilling else need)  # same order on every rank
            mine = picked[self.rank::self.world_size]
            t0 = time.perf_counter()
            groups = self._sample(mine, step, round_, max_new, temp) if mine else []
            metrics["time_generation_s"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            rewards = self._score(mine, groups, metrics, step, round_) if mine else []
            metrics["time_reward_s"].append(time.perf_counter() - t0)
            for i, rollouts, r in zip(mine, groups, rewards):
                adv, uniform = group_advantages(r, cfg.advantage_transform, cfg.advantage_std)
                no_signal = uniform or not carries_signal(rollouts, adv, cfg.overlong_filtering)
                metrics["groups"].append(1)
                metrics["think"].append(int(self.modes[i] == "think"))
                metrics["zero_var"].append(int(no_signal))
                metrics["rewards"].extend(r)
                metrics["lengths"].extend(len(x.token_ids) for x in rollouts)
                metrics["truncated"].extend(int(x.truncated) for x in rollouts)
                if uniform:  # solved or unsolvable: what retire_solved_prompts retires
                    metrics["uniform_prompts"].append(i)
                if no_signal and cfg.dynamic_filtering:
                    continue
                kept.append((self.prompt_ids[i], rollouts, r, adv))
            (have,) = backend.all_reduce_sum([float(len(kept))])
            need = cfg.prompts_per_step - int(have)
            if need <= 0 or round_ + 1 == rounds:
                break
            metrics["refill_rounds"].append(1)
        if refilling:
            kept = kept[:max(0, math.ceil(cfg.prompts_per_step / self.world_size))]
        return kept

    def train_step(self, step: int) -> dict[str, float]:

        cfg, backend = self.config, self.backend
        t_start = time.perf_counter()
        max_new, temp = cfg.budget_at(step)
        m: dict[str, list] = {k: [] for k in STEP_LISTS}
        kept = self._collect(step, max_new, temp, m)
        uniform, audit = m.pop("uniform_prompts"), m.pop("audit")
        if cfg.retire_solved_prompts:
            self._retire([i for part in backend.gather_objects(uniform) for i in part])
        # Rollouts that carry loss: overlong ones are excluded; zero-weight ones cannot move the
        # weights (no KL, ratio 1), so their forward is skipped, but they still count in the
        # token-level denominator unless filtered, as in the paper's loss.
        groups, denom_tokens, denom_seqs, n_local = [], 0, 0, 0
        for prompt, rollouts, _, adv in kept:
            trained = []
            for rollout, a in zip(rollouts, adv):
                if cfg.overlong_filtering and rollout.truncated or not rollout.token_ids:
                    continue
                denom_tokens += len(rollout.token_ids)
                denom_seqs += 1
                if a != 0.0 or self.reference is not None:
                    trained.append((rollout.token_ids, a))
            if trained:
                groups.append((prompt, trained))
                n_local += len(trained)
        n_tok, n_seq, n_trained = backend.all_reduce_sum([float(denom_tokens), float(denom_seqs), float(n_local)])
        # Sampler log-probs per completion, found again by its token list (micro-batching keeps the objects).
        sampled = {id(r.token_ids): r.logprobs for _, rollouts, _, _ in kept for r in rollouts}
        t0 = time.perf_counter()
        loss_total, entropy_sum, entropy_n, kl_sum, grad_norm = 0.0, 0.0, 0, 0.0, 0.0
        old_logps: dict[int, Any] = {}
        for epoch in range(cfg.ppo_epochs if n_trained else 0):  # nothing to learn: no update at all
            batches = self._micro_batches(groups)
            # Under ZeRO every rank runs the same number of forward/backward passes; a rank with
            # fewer batches runs a dummy one with zero loss.
            n_batches = max(backend.gather_objects(len(batches)))
            for k in range(n_batches):
                rows = batches[k] if k < len(batches) else [([self.pad_id], [[self.pad_id]], [0.0])]
                loss, stats = self._loss(rows, epoch, k, old_logps, n_tok, n_seq, dummy=k >= len(batches),
                                         temperature=temp)
                backend.backward(loss * backend.grad_scale(), last=k == n_batches - 1)
                loss_total += float(loss.detach())
                if epoch == 0:
                    entropy_sum += stats["entropy_sum"]
                    entropy_n += stats["n"]
                    kl_sum += stats["kl_sum"]
                    if k < len(batches):  # before any update: the sampler's policy
                        m["lp_gap"].append(sampler_gap(stats["logp"], [len(c) for _, cs, _ in rows for c in cs],
                                                       [sampled.get(id(c)) for _, cs, _ in rows for c in cs]))
            grad_norm = backend.step()
            if self.engine_name != "hf":  # an engine holding its own copy: push after every update
                self.engine.sync_weights(backend.model)
        t_train = time.perf_counter() - t0
        totals = backend.all_reduce_sum([loss_total, entropy_sum, float(entropy_n), kl_sum])
        self._record(step, audit)
        return self._metrics(m, totals, grad_norm, n_trained, max_new, temp, t_train, time.perf_counter() - t_start)

    def _retire(self, uniform: list[int]) -> None:
        """Drop prompts whose group scored all the same (always or never solved) from later epochs,
        unless that would leave fewer than one step's prompts."""
        new = sorted({i for i in uniform if i not in self.order.retired})
        if new and len(self.order.active(self.order.epoch + 1)) - len(new) >= self.config.prompts_per_step:
            self.order.retire(new)

    def _micro_batches(self, groups: list[tuple[list[int], list[tuple[list[int], float]]]]) -> list[list[tuple]]:
        """Rows of (prompt, completions, advantages), cut so each padded micro-batch holds about
        micro_batch_tokens; a prompt is computed once for the completions sharing its row."""
        budget = self.config.micro_batch_tokens
        pieces = []  # a group too wide for one row is split, each piece repeating the prompt
        for prompt, trained in groups:
            current, width = [], len(prompt)
            for ids, a in trained:
                if current and width + len(ids) > budget:
                    pieces.append((prompt, [c for c, _ in current], [a_ for _, a_ in current]))
                    current, width = [], len(prompt)
                current.append((ids, a))
                width += len(ids)
            pieces.append((prompt, [c for c, _ in current], [a_ for _, a_ in current]))
        pieces.sort(key=lambda r: len(r[0]) + sum(len(c) for c in r[1]))
        batches, current = [], []
        for piece in pieces:
            width = len(piece[0]) + sum(len(c) for c in piece[1])
            if current and width * (len(current) + 1) > budget:
                batches.append(current)
                current = []
            current.append(piece)
        return batches + ([current] if current else [])

    def _loss(self, rows: list[tuple], epoch: int, k: int, old_logps: dict[int, Any], n_tok: float, n_seq: float,
              dummy: bool = False, temperature: float = 1.0):
        """Loss of one micro-batch, its log-probs at the rollouts' sampling `temperature`."""
        import torch

        cfg, backend = self.config, self.backend
        batch = build_group_batch([(p, cs) for p, cs, _ in rows], self.pad_id)
        logp, entropy = target_logprobs(backend, batch, with_entropy=epoch == 0, temperature=temperature)
        per_rollout = [(c, a) for _, cs, advs in rows for c, a in zip(cs, advs)]
        adv = torch.tensor([a for c, a in per_rollout for _ in c], dtype=logp.dtype, device=logp.device)
        if cfg.loss_aggregation == "token":
            weight = torch.full_like(logp, 1.0 / max(n_tok, 1.0))
        else:
            weight = torch.tensor([1.0 / (len(c) * max(n_seq, 1.0)) for c, _ in per_rollout for _ in c],
                                  dtype=logp.dtype, device=logp.device)
        if epoch == 0:  # micro-batches are identical across epochs, so k names the same rows
            old_logps[k] = logp.detach()
        ratio = torch.exp(logp - old_logps[k])  # exactly 1 (with the policy gradient) on epoch 0
        objective = ratio * adv
        if cfg.clip_eps is not None:
            clipped = torch.clamp(ratio, 1 - cfg.clip_eps, 1 + cfg.clip_eps) * adv
            objective = torch.minimum(objective, clipped)
        per_token = -objective
        kl_sum = 0.0
        if self.reference is not None:
            with torch.no_grad():
                ref, _ = target_logprobs(backend, batch, model=self.reference, temperature=temperature)
            delta = ref - logp
            kl = torch.exp(delta) - delta - 1  # k3 estimator, unbiased and >= 0
            per_token = per_token + cfg.kl_coef * kl
            kl_sum = float(kl.detach().sum())
        loss = (per_token * weight).sum()
        if dummy:
            return loss * 0.0, {"entropy_sum": 0.0, "n": 0, "kl_sum": 0.0}
        ent = float(entropy.sum()) if entropy is not None else 0.0
        return loss, {"entropy_sum": ent, "n": int(logp.numel()), "kl_sum": kl_sum, "logp": logp.detach()}

    def _metrics(self, m: dict[str, list], totals: list[float], grad_norm: float, n_trained: float,
                 max_new: int, temp: float, t_train: float, t_step: float) -> dict[str, float]:
        backend = self.backend
        loss, ent_sum, ent_n, kl_sum = totals
        gathered = backend.gather_objects({k: v for k, v in m.items()})
        merged: dict[str, list] = {}
        for part in gathered:
            for k, v in part.items():
                merged.setdefault(k, []).extend(v)
        rewards_mean, rewards_std = _stats(merged["rewards"])
        lengths = merged["lengths"]
        out = {
            "loss": loss, "reward_mean": rewards_mean, "reward_std": rewards_std,
            "zero_var_frac": sum(merged["zero_var"]) / max(1, len(merged["groups"])),
            "filtered_groups": float(sum(merged["zero_var"]) if self.config.dynamic_filtering else 0),
            "refill_rounds": float(len(m["refill_rounds"])),
            "think_frac": sum(merged["think"]) / max(1, len(merged["think"])),
            "retired_prompts": float(len(self.order.retired)),
            "completion_len_mean": sum(lengths) / max(1, len(lengths)), "completion_len_max": float(max(lengths, default=0)),
            "truncated_frac": sum(merged["truncated"]) / max(1, len(merged["truncated"])),
            "entropy": ent_sum / ent_n if ent_n else float("nan"), "kl": kl_sum / ent_n if ent_n else 0.0,
            "trained_rollouts": n_trained, "grad_norm": grad_norm, "lr": backend.lr(),
            "max_new_tokens": float(max_new), "temperature": temp,
            "time_generation_s": sum(m["time_generation_s"]), "time_reward_s": sum(m["time_reward_s"]),
            "time_training_s": t_train, "time_step_s": t_step,
            "tokens_per_s": sum(lengths) / max(t_step, 1e-9),
            "reward_cache_hits": float(sum(merged["reward_cache_hits"])),
            "reward_cache_misses": float(sum(merged["reward_cache_misses"])),
            **gap_metrics(merged["lp_gap"]),
        }
        for key, values in merged.items():
            if key.startswith("reward/"):
                out[f"{key}/mean"], out[f"{key}/std"] = _stats(values)
            elif key.startswith("reward_failures/"):
                out[key] = float(sum(values))
        return out
