#!/usr/bin/env bash
# The main job, from a fresh clone: build example_pkg's wheel with `python -m build`, install
# it into a clean virtual environment, run it with no C++ compiler on PATH and an empty
# inductor cache, and print the cold start it saves against eager and torch.compile.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${AOT_BUILD_DEMO_DIR:-$ROOT/.demo}
rm -rf "$WORK" && mkdir -p "$WORK/wheels"

./scripts/dev-setup.sh
PY=$ROOT/.venv/bin/python

echo "== 1. build the aot-build wheel (the build requirement example_pkg names)"
"$PY" -m build --wheel --no-isolation --outdir "$WORK/wheels" . >"$WORK/aot-build.log" 2>&1 \
  || { cat "$WORK/aot-build.log"; exit 1; }

echo "== 2. python -m build example_pkg (isolated build env: setuptools, aot-build, torch==2.13.0)"
# pip finds torch through its own find-links; append our wheel folder, never replace it.
EXISTING=$("$PY" -m pip config get global.find-links 2>/dev/null || true)
export PIP_FIND_LINKS="${EXISTING:+$EXISTING }$WORK/wheels"
"$PY" -m build --outdir "$WORK/wheels" example_pkg 2>&1 | tee "$WORK/example-build.log" \
  | grep -E "aot-build|Successfully|ERROR|rror:" || true
WHEEL=$(ls "$WORK"/wheels/example_pkg-*.whl)
"$PY" -m aot_build inspect "$WHEEL"

echo "== 3. install into a clean virtual environment"
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q "$WHEEL" 2>&1 | grep -v "is ignored" || true

echo "== 4. run it: no compiler on PATH, empty TORCHINDUCTOR_CACHE_DIR, neutral working directory"
mkdir -p "$WORK/run" && cp scripts/demo_run.py "$WORK/run/"
cd "$WORK/run"
env -i HOME="$HOME" PATH="$WORK/venv/bin" "$WORK/venv/bin/python" demo_run.py
