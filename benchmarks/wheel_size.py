"""The size of the wheel with its pretrained models: build it (``python -m build`` in a
throw-away virtual environment, as the wheel tier ``.ci/test-wheel.sh`` does) and record
its size and its largest members.

Writes ``benchmarks/results/wheel_size.json``, read by the zero-shot report's targets
table (issue #50: the wheel with its pretrained models <= 30 MB).

    python benchmarks/wheel_size.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import venv
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "wheel_size.json"
BOUND_MB = 30.0


def build_wheel(out: Path) -> Path:
    env = out / "build-env"
    venv.create(env, with_pip=True)
    py = env / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "build>=1,<2"], check=True)
    subprocess.run([str(py), "-m", "build", "-q", "--wheel", "--outdir", str(out / "dist"), str(REPO)],
                   check=True, stdout=subprocess.DEVNULL)
    (wheel,) = (out / "dist").glob("chunksel-*.whl")
    return wheel


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_wheel(Path(tmp))
        with zipfile.ZipFile(wheel) as z:
            infos = z.infolist()
        size = wheel.stat().st_size
        models = [i for i in infos if i.filename.startswith("chunksel/pretrained/models/")]
        largest = sorted(infos, key=lambda i: -i.compress_size)[:5]
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=REPO).stdout.strip()
        out = {
            "benchmark": "wheel_size", "commit": commit, "wheel": wheel.name, "bytes": size,
            "mb": size / 1e6, "bound_mb": BOUND_MB, "members": len(infos),
            "pretrained_bytes_compressed": sum(i.compress_size for i in models),
            "largest": [{"file": i.filename, "compressed_bytes": i.compress_size} for i in largest],
        }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"{out['wheel']}: {out['mb']:.2f} MB ({out['pretrained_bytes_compressed'] / 1e6:.2f} MB of it the "
          f"pretrained models), bound {BOUND_MB:.0f} MB -> {RESULTS.relative_to(REPO)}")
    return 0 if out["mb"] <= BOUND_MB else 1


if __name__ == "__main__":
    sys.exit(main())
