#!/usr/bin/env bash
# The numpy-only test tier: the core (records, configs, data loading, metrics, significance,
# the selector base class, the package's layering and private names) on an install without
# torch, in a second virtual environment, .venv-np (created on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV_NP:-.venv-np}"
if [ ! -f "$VENV/.installed" ]; then
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q 'numpy>=1.24,<3' 'tqdm>=4.60,<5' 'scipy>=1.10,<2' 'pytest>=8,<10'
  "$VENV/bin/pip" install -q --no-deps -e .
  touch "$VENV/.installed"
fi
"$VENV/bin/python" -c 'import importlib.util as u, sys; sys.exit("torch must not be installed in the numpy-only tier" if u.find_spec("torch") else 0)'
"$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  tests/unit/core/test_types.py tests/unit/core/test_selector_base.py tests/unit/core/test_layering.py \
  tests/unit/core/test_structure.py tests/unit/core/test_private_names.py \
  tests/unit/data/test_jsonl.py tests/unit/data/test_text_splits.py tests/unit/data/test_chunks.py \
  tests/unit/eval/test_eval_metrics.py tests/unit/eval/test_eval_significance.py tests/unit/study/test_results.py tests/unit/study/test_compare.py \
  tests/unit/eval/test_eval_cost.py tests/unit/eval/test_quantization_seeds.py "$@"
