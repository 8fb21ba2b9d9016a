"""Multi-domain on-policy distillation (MOPD, Nemotron-Cascade 2, arXiv 2603.19220).

The student samples (GRPO's rollout engine, with sampling-time log-probs); each prompt's domain
(the prompt set's `domain` column) picks its teacher, a checkpoint of the same recipe, which only
scores the student's tokens in one forward pass (no generation). Per sampled token y_t:

    a_t = log π_teacher(y_t | s_t) − log π_train(y_t | s_t)                (stop-gradient)
    r_t = π_train(y_t | s_t) / π_inf(y_t | s_t),  w_t = sg[r_t] · 1[lo ≤ r_t ≤ hi]
    loss = −(1/|V|) Σ_t w_t · sg[a_t] · log π_train(y_t | s_t)

Our reading of the paper's −E[(1/|V|) Σ_t …]: |V| is the number of valid response tokens of the
whole step (every non-empty rollout's sampled tokens, truncated ones included: a truncated
rollout's tokens still carry a per-token teacher signal), so the loss is a token-level mean over
the step, like GRPO's token-level loss; the expectation is the average over the step's rollouts
that this sum already is. a_t is the reverse-KL term on the sampled token only (not a full-vocab
KL); its negative mean is the sampled (single-sample, so noisy and possibly negative on few
tokens) estimate of KL(π_train ‖ π_teacher), logged per teacher.
All three log-probs are of the sampling distribution at the step's temperature T (`budget_at`):
π_train and π_teacher are log softmax(logits / T) of the training and teacher forwards
(trainer.batching.target_logprobs, as verl and TRL score rollouts), π_inf the sampler's own
log-prob after temperature (trainer.rollout returns it). π_train and π_inf are then the same
policy, so r_t measures only the numerical train/inference mismatch (large with vLLM in bf16) and
the window [importance_min, importance_max] truncates that; with top_p < 1 the sampler's
nucleus-renormalised log-prob adds −log(nucleus mass), so r_t < 1 there (the recipes keep top_p 1).
a_t is the reverse-KL term between the two tempered distributions.

Teachers: on CPU (`keep_teachers_loaded: false`) one teacher is loaded per step and batch of its
prompts and freed before the next; on a GPU they may stay resident. Metrics: `reverse_kl/<domain
key>` (mean over that teacher's tokens), `clipped_frac` (tokens outside the importance window),
`adv_mean`/`adv_std`/`adv_min`/`adv_max`, `ratio_mean`, `rollout_logprob_diff_mean`/`_max`
(|log π_train − log π_inf| over the step's tokens, before the update).
"""

from __future__ import annotations

import math
import time
from typing import Any, ClassVar, Literal

from pydantic import Field

from spec.train import MOPDSettings, RewardSpec
from trainer.batching import build_group_batch, gap_metrics, sampler_gap, target_logprobs
from trainer.config import GRPOConfig
from trainer.grpo import GRPOTrainer

__all__ = ["MOPDConfig", "MOPDTrainer", "mopd_loss", "teacher_key"]


class MOPDConfig(MOPDSettings, GRPOConfig):
    """A MOPD stage: GRPOConfig's sampling settings plus the teachers (model folders) per domain."""

    trainer_class: ClassVar[str] = "trainer.mopd:MOPDTrainer"

    backend: Literal["torch"] = "torch"
    """Training backend (MOPD runs on the built-in torch backend)."""
    rewards: list[RewardSpec] = Field(default_factory=list)
    """Optional rewards, only monitored (metrics and the rollout audit); the loss ignores them."""
    teachers: dict[str, str] = Field(min_length=1)
    """Row domain (or `default`) -> teacher model folder (the platform fills in the checkpoint paths)."""


def teacher_key(domain: str | None, teachers: dict[str, Any]) -> str:
    """The teacher entry serving `domain`: its own, else `default` (KeyError when neither)."""
    if domain in teachers:
        return str(domain)
    if "default" in teachers:
        return "default"
    raise KeyError(f"no teacher for domain {domain!r} (teachers: {sorted(teachers)}; add `default`)")


def mopd_loss(logp_train: Any, logp_teacher: Any, logp_inf: Any, n_valid: float,
              low: float = 0.5, high: float = 2.0) -> tuple[Any, dict[str, Any]]:
    """The MOPD loss of one micro-batch (flat per-token tensors) and its detached per-token terms.

    Gradients flow only through `logp_train` in the last factor: the advantage and the importance
    weight are computed from detached values. `n_valid` is |V| of the whole step.
    """
    import torch

    train = logp_train.detach()
    adv = logp_teacher.detach().to(train.dtype) - train
    ratio = torch.exp(train - logp_inf.detach().to(train.dtype))
    inside = (ratio >= low) & (ratio <= high)
    weight = ratio * inside.to(ratio.dtype)
    loss = -(weight * adv * logp_train).sum() / max(float(n_valid), 1.0)
    return loss, {"adv": adv, "ratio": ratio, "clipped": ~inside}


class MOPDTrainer(GRPOTrainer):
    """GRPO's prompt stream, rollout engine and micro-batching with the MOPD objective."""

    algorithm = "mopd"
    progress_keys = ("reverse_kl", "clipped_frac", "adv_mean", "completion_len_mean", "grad_norm",
                     "time_generation_s", "time_teacher_s", "time_training_s")

    def __init__(self, config: MOPDConfig, tokenizer: Any, world_size: int = 1, rank: int = 0):
        super().__init__(config, tokenizer, world_size=world_size, rank=rank)
        self.route = [teacher_key(r.get("domain"), config.teachers) for r in self.rows]  # raises early
        self._loaded: dict[str, Any] = {}

    def summary(self) -> dict[str, Any]:
        used: dict[str, int] = {}
        for key in self.route:
            used[key] = used.get(key, 0) + 1
        return super().summary() | {"teachers": dict(self.config.teachers), "prompts_per_teacher": used}

    # -- teachers ---------------------------------------------------------------------------

    def _teacher(self, key: str) -> Any:
        if key in self._loaded:
            return self._loaded[key]
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(self.config.teachers[key], dtype=torch.float32)
        student_vocab = self.backend.model.get_output_embeddings().weight.shape[0]
        if model.get_output_embeddings().weight.shape[0] != student_vocab:
            raise ValueError(f"teacher {key!r} ({self.config.teachers[key]}) has another vocabulary than the student")
        model = model.to(self.backend.device).eval().requires_grad_(False)
        if self.config.keep_teachers_loaded:
            self._loaded[key] = model
        return model

    def _teacher_logprobs(self, by_prompt: list[tuple[int, list[tuple[int, list[int]]]]],
                          temperature: float = 1.0) -> dict[int, Any]:
        """{rollout id: teacher log-probs of its tokens at the sampling `temperature`}, each teacher
        loaded once for its prompts."""
        import torch

        out: dict[int, Any] = {}
        for key in sorted({self.route[i] for i, _ in by_prompt}):
            groups = [(self.prompt_ids[i], [(ids, float(rid)) for rid, ids in rollouts])
                      for i, rollouts in by_prompt if self.route[i] == key]
            model = self._teacher(key)
            for rows in self._micro_batches(groups):
                with torch.no_grad():
                    logp, _ = target_logprobs(self.backend, build_group_batch([(p, cs) for p, cs, _ in rows]),
                                              model=model, temperature=temperature)
                self._split(rows, logp.detach(), out)
            del model
        return out

    @staticmethod
    def _split(rows: list[tuple], flat: Any, out: dict[int, Any]) -> None:
        """Cut a micro-batch's flat per-token tensor back into rollouts (ids ride in the advantage slot)."""
        at = 0
        for _, completions, ids in rows:
            for tokens, rid in zip(completions, ids):
                out[int(rid)] = flat[at:at + len(tokens)]
                at += len(tokens)

    # -- one step ---------------------------------------------------------------------------

    def train_step(self, step: int) -> dict[str, float]:
        import torch

        cfg, backend = self.config, self.backend
        t_start = time.perf_counter()
        max_new, temp = cfg.budget_at(step)
        mine = self.order.take(cfg.prompts_per_step)[self.rank::self.world_size]
        seed = (cfg.seed * 1_000_003 + step * 1009 + self.rank) % 2**63
        t0 = time.perf_counter()
        groups = self.engine.generate([self.prompt_ids[i] for i in mine], cfg.num_generations, max_new, temp,
                                      cfg.top_p, seed=seed, return_logprobs=True) if mine else []
        t_gen = time.perf_counter() - t0
        m: dict[str, list] = {"reward_cache_hits": [], "reward_cache_misses": [], "audit": []}
        if self.rewards and mine:
            self._score(mine, groups, m, step, 0)
        rollouts, by_prompt = [], []
        for i, group in zip(mine, groups):
            trained = []
            for r in group:
                if r.token_ids:
                    trained.append((len(rollouts), r.token_ids))
                    rollouts.append((i, r))
            if trained:
                by_prompt.append((i, trained))
        (n_valid,) = backend.all_reduce_sum([float(sum(len(r.token_ids) for _, r in rollouts))])
        t0 = time.perf_counter()
        teacher = self._teacher_logprobs(by_prompt, temp)
        t_teacher = time.perf_counter() - t0
        t0 = time.perf_counter()
        loss_total, grad_norm, missing = 0.0, 0.0, 0
        advs, ratios, clipped, per_key, gaps = [], [], [], {}, []
        batches = self._micro_batches([(self.prompt_ids[i], [(ids, float(rid)) for rid, ids in tr])
                                       for i, tr in by_prompt])
        for k, rows in enumerate(batches):
            rids = [int(r) for _, _, ids in rows for r in ids]
            logp, _ = target_logprobs(backend, build_group_batch([(p, cs) for p, cs, _ in rows]), temperature=temp)
            inf_parts = []
            for rid in rids:
                lp = rollouts[rid][1].logprobs
                missing += lp is None or len(lp) != len(rollouts[rid][1].token_ids)
                inf_parts.append(None if lp is None or len(lp) != len(rollouts[rid][1].token_ids)
                                 else torch.tensor(lp, dtype=torch.float32, device=logp.device))
            lengths = [len(rollouts[rid][1].token_ids) for rid in rids]
            gaps.append(sampler_gap(logp, lengths, [rollouts[rid][1].logprobs for rid in rids]))  # before the update
            train_parts = logp.detach().split(lengths)
            logp_inf = torch.cat([p if p is not None else t for p, t in zip(inf_parts, train_parts)])
            logp_teacher = torch.cat([teacher[rid].to(logp.device) for rid in rids])
            loss, terms = mopd_loss(logp, logp_teacher, logp_inf, n_valid, cfg.importance_min, cfg.importance_max)
            backend.backward(loss * backend.grad_scale(), last=k == len(batches) - 1)
            loss_total += float(loss.detach())
            advs.append(terms["adv"])
            ratios.append(terms["ratio"])
            clipped.append(terms["clipped"])
            for rid, adv in zip(rids, terms["adv"].split(lengths)):
                key = self.route[rollouts[rid][0]]
                total, count = per_key.get(key, (0.0, 0))
                per_key[key] = (total - float(adv.sum()), count + len(adv))
        if batches:
            grad_norm = backend.step()
        t_train = time.perf_counter() - t0
        gap = gap_metrics([g for part in backend.gather_objects(gaps) for g in part])  # collective: every rank
        if self.rewards:
            self._record(step, m["audit"])
        return gap | self._mopd_metrics(advs, ratios, clipped, per_key, groups, m, loss_total, grad_norm, missing,
                                        max_new, temp, t_gen, t_teacher, t_train, time.perf_counter() - t_start)

    def _mopd_metrics(self, advs: list, ratios: list, clipped: list, per_key: dict, groups: list, m: dict,
                      loss: float, grad_norm: float, missing: int, max_new: int, temp: float, t_gen: float,
                      t_teacher: float, t_train: float, t_step: float) -> dict[str, float]:
        import torch

        adv = torch.cat(advs) if advs else torch.zeros(0)
        ratio = torch.cat(ratios) if ratios else torch.zeros(0)
        clip = torch.cat(clipped) if clipped else torch.zeros(0, dtype=torch.bool)
        lengths = [len(r.token_ids) for g in groups for r in g]
        n = int(adv.numel())
        out = {
            "loss": loss, "grad_norm": grad_norm, "lr": self.backend.lr(), "tokens": float(n),
            "adv_mean": float(adv.mean()) if n else math.nan, "adv_std": float(adv.std(unbiased=False)) if n else math.nan,
            "adv_min": float(adv.min()) if n else math.nan, "adv_max": float(adv.max()) if n else math.nan,
            "reverse_kl": -float(adv.mean()) if n else math.nan,
            "clipped_frac": float(clip.float().mean()) if n else 0.0,
            "ratio_mean": float(ratio.mean()) if n else math.nan, "missing_inference_logprobs": float(missing),
            "completion_len_mean": sum(lengths) / max(1, len(lengths)),
            "truncated_frac": sum(r.truncated for g in groups for r in g) / max(1, len(lengths)),
            "max_new_tokens": float(max_new), "temperature": temp,
            "time_generation_s": t_gen, "time_teacher_s": t_teacher, "time_training_s": t_train, "time_step_s": t_step,
            "tokens_per_s": sum(lengths) / max(t_step, 1e-9),
        }
        for key, (total, count) in sorted(per_key.items()):
            out[f"reverse_kl/{key}"] = total / max(count, 1)
        for key, values in m.items():
            if key.startswith("reward/"):
                out[f"{key}/mean"] = sum(values) / len(values) if values else math.nan
        if self.rewards:
            out["reward_mean"] = (sum(a["reward"] for a in m["audit"]) / len(m["audit"])) if m["audit"] else math.nan
        return out

