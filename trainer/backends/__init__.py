"""Training backends: what differs between one torch process, DeepSpeed ZeRO ranks and TRL.

A backend is one module here with `run(config, trainer) -> StageResult`, registered by name in
trainer/backend_registry.py, which `trainer.stage` dispatches through. torch_backend and
deepspeed_backend subclass `trainer.backend_api.Backend` (the surface the training loop is
written against, plus the shared LR schedule, dtype choice, optimizer and NaN guard) and run the
shared loop, trainer/loop.py; trl_adapter hands the whole GRPO stage to TRL. Nothing is
re-exported: import from the modules themselves.

Modules:
  torch_backend.py      one process, CPU or one GPU: plain torch AdamW + LambdaLR
  deepspeed_backend.py  DeepSpeed ZeRO 1/2/3: the same loop on every rank, launched with torchrun
  trl_adapter.py        the TRL plug: one GRPO stage through TRL's `GRPOTrainer`, scored through our rewards
"""
