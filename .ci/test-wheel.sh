#!/usr/bin/env bash
# The wheel tier: build the wheel (python -m build), install it with its pretrained models
# into a fresh virtual environment outside the repository, and run the README's quickstart
# there with no CHUNKSEL_DATA and an empty cache. Fails when the wheel is over 30 MB, a
# pretrained model is missing from it, or the quickstart does not pick the evidence.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
REPO="$PWD"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)
"$PYTHON" -m venv "$WORK/build-env"
"$WORK/build-env/bin/pip" install -q 'build>=1,<2'
"$WORK/build-env/bin/python" -m build -q --wheel --outdir "$WORK/dist" . >/dev/null
WHEEL="$(ls "$WORK"/dist/chunksel-*.whl)"
size=$(stat -c %s "$WHEEL")
echo "wheel: $(basename "$WHEEL"), $((size / 1024)) KiB"
[ "$size" -le $((30 * 1024 * 1024)) ] || { echo "the wheel is over 30 MB"; exit 1; }
for f in anchored-base/config.json lambdamart-base/config.json MANIFEST.json; do
  "$WORK/build-env/bin/python" -c 'import sys, zipfile; n = "chunksel/pretrained/models/" + sys.argv[2]; sys.exit(0 if n in zipfile.ZipFile(sys.argv[1]).namelist() else "missing from the wheel: " + n)' "$WHEEL" "$f"
done
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q torch==2.13.0
"$WORK/venv/bin/pip" install -q "$WHEEL[pretrained,retrieval]"
# the README's first python block, run outside the repository
"$PYTHON" - "$REPO/README.md" "$WORK/quickstart.py" <<'PY'
import sys
text = open(sys.argv[1], encoding="utf-8").read()
open(sys.argv[2], "w", encoding="utf-8").write(text.split("```python\n", 1)[1].split("```", 1)[0])
PY
cd "$WORK"
out="$(env -u CHUNKSEL_DATA CHUNKSEL_CACHE="$WORK/cache" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  TQDM_DISABLE=1 "$WORK/venv/bin/python" quickstart.py)"
echo "quickstart: $out"
"$WORK/venv/bin/python" -c 'import chunksel.pretrained as p; p.verify_pretrained(); print("manifest verified in", p.MODELS_DIR)'
case "$out" in "[(2, "*) ;; *) echo "the quickstart did not pick chunk 2"; exit 1 ;; esac
echo "wheel tier: $(( $(date +%s) - start )) s"
