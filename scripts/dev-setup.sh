#!/usr/bin/env bash
# Create .venv with the pinned development tools, torch, and aot-build itself (editable).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# pip byte-compiles one file at a time (torch, transformers, sympy: about half of this
# script's time on CI's two cores); compileall does the same on every core. The .pyc files must
# be there: where PYTHONDONTWRITEBYTECODE is set (as on CI), every process would otherwise
# compile torch's sources again on import.
.venv/bin/python -m pip install -q --no-compile -r requirements-dev.txt
# As pip does, a file this Python cannot compile is skipped (torch ships one for 3.12 only).
.venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null || true
.venv/bin/python -m pip install -q --no-deps --no-build-isolation -e .
echo "dev-setup: .venv ready ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
