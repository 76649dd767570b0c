#!/usr/bin/env bash
# Run the MoE adapter tests against transformers 4.x (ModuleList experts layout) in a
# second virtual environment, .venv-tf4 (created on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV_TF4:-.venv-tf4}"
if [ ! -f "$VENV/.installed" ]; then
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.13.0
  "$VENV/bin/pip" install -q 'transformers>=4.51,<5' 'tokenizers' numpy tqdm safetensors pytest
  "$VENV/bin/pip" install -q --no-deps -e .
  touch "$VENV/.installed"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$VENV/bin/python" -c 'import transformers; assert transformers.__version__.startswith("4."), transformers.__version__; print("transformers", transformers.__version__)'
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/unit/features/test_moe_adapters.py "$@"
