"""Training backends: what differs between one torch process, DeepSpeed ZeRO ranks and TRL.

A backend is one module here with `run(kind: str, config) -> StageResult` (kind "sft" or
"grpo"), registered by name in trainer/backend_registry.py, which `trainer.stage.run_stage`
dispatches through. torch_backend and deepspeed_backend subclass `Backend` (base.py: the
surface the SFT and GRPO loops are written against, plus the shared LR schedule, dtype choice,
optimizer and NaN guard) and run the shared loop, trainer/loop.py; trl_adapter hands the whole
GRPO stage to TRL. Nothing is re-exported: import from the modules themselves.
"""
