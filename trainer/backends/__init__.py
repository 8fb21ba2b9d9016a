"""Training backends: what differs between one torch process, DeepSpeed ZeRO ranks and TRL.

A backend is one module here, registered by name in `trainer.stage.BACKENDS`: either a
`trainer.backend_api.Backend` subclass (the surface the training loop is written against, plus the
shared LR schedule, dtype choice, optimizer and NaN guard), which `trainer.stage` runs through its
loop `execute` in process (torch_backend), or a `run(config, trainer) -> StageResult` function that
runs the stage its own way (deepspeed_backend: torchrun ranks that each run `execute` with a
DeepSpeedBackend; trl_adapter: the whole GRPO stage handed to TRL). Nothing is re-exported: import
from the modules themselves.

Modules:
  torch_backend.py      one process, CPU or one GPU: plain torch AdamW + LambdaLR
  deepspeed_backend.py  DeepSpeed ZeRO 1/2/3: the same loop on every rank, launched with torchrun
  trl_adapter.py        the TRL plug: one GRPO stage through TRL's `GRPOTrainer`, scored through our rewards
"""
