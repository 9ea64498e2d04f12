#!/usr/bin/env bash
# Create .venv with the pinned development tools, torch, and aot-build itself (editable).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q -r requirements-dev.txt
.venv/bin/python -m pip install -q --no-deps --no-build-isolation -e .
echo "dev-setup: .venv ready ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
