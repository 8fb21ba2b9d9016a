"""Stage configs: YAML loading, field-named errors, hashes, schedules, the docs table."""

from __future__ import annotations

import pytest

from trainer.config import (ConfigError, GRPOConfig, SFTConfig, config_reference_markdown, load_config,
                            parse_config)

REQUIRED = {"policy": "p", "dataset": "d.parquet", "output_dir": "o"}


def test_yaml_with_issue_field_names_loads(tmp_path):
    path = tmp_path / "grpo.yaml"
    path.write_text(
        "policy: ckpt\ndataset: rl.parquet\nrewards: [math]\noutput_dir: out\nmax_steps: 3\nsave_steps: 1\n"
        "seed: 7\nbackend: torch\nnum_generations: 4\nprompts_per_step: 2\nmax_new_tokens: 32\n"
        "learning_rate: 2.0e-6\ntemperature: 0.6\nlength_schedule: [[0, 16], [2, 32]]\n")
    cfg = load_config(path, "grpo")
    assert isinstance(cfg, GRPOConfig) and [r.name for r in cfg.rewards] == ["math"] and cfg.temperature == 0.6
    assert cfg.rewards[0].weight == 1.0 and cfg.rewards[0].options == {}
    assert cfg.kl_coef == 0 and cfg.ppo_epochs == 1 and cfg.loss_aggregation == "token"
    assert cfg.adam_betas == (0.9, 0.95) and cfg.overlong_filtering
    assert [cfg.budget_at(s)[0] for s in range(4)] == [16, 16, 32, 32]


def test_errors_name_every_bad_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("policy: p\ndataset: d\noutput_dir: o\nrewards: [math]\nmax_steps: many\nbogus: 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, "grpo")
    text = str(err.value)
    assert "max_steps" in text and "bogus" in text and str(path) in text
    with pytest.raises(ConfigError, match="rewards"):
        parse_config(REQUIRED, "grpo")
    with pytest.raises(ConfigError, match="rewards.1.options"):
        parse_config({**REQUIRED, "rewards": ["a", {"name": "b", "options": "fast"}]}, "grpo")
    with pytest.raises(ConfigError, match="reward_weights"):  # the three parallel fields are gone
        parse_config({**REQUIRED, "rewards": ["a"], "reward_weights": [1.0]}, "grpo")
    with pytest.raises(ConfigError, match="schedule"):
        parse_config({**REQUIRED, "rewards": ["a"], "temperature_schedule": [[5, 1.0], [2, 0.8]]}, "grpo")
    with pytest.raises(ConfigError, match="unknown algorithm"):
        parse_config(REQUIRED, "dpo")


def test_config_hash_ignores_resume_only():
    a = SFTConfig(**REQUIRED)
    assert a.config_hash() == SFTConfig(**REQUIRED, resume=True).config_hash()
    assert a.config_hash() != SFTConfig(**REQUIRED, seed=1).config_hash()
    assert a.config_hash() != SFTConfig(**REQUIRED, lineage={"asset": "x"}).config_hash()


def test_reference_table_documents_every_field():
    text = config_reference_markdown()
    for cls in (SFTConfig, GRPOConfig):
        for name, info in cls.model_fields.items():
            assert f"| `{name}` |" in text
            assert info.description, f"{cls.__name__}.{name} has no docstring"
    assert "**required**" in text and "zero_stage" in text


def test_config_module_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, trainer.config, trainer.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
