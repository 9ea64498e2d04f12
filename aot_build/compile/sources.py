"""The fingerprint of aot_build's own build-side code (torch-free, so benchmark drivers can
use it too)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path


def build_side_files() -> list[Path]:
    """aot_build's sources that shape what a build ships (all but the run-time ``load``): its
    Python modules and the guard evaluator's C source, which every wheel ships compiled."""
    root = Path(__file__).resolve().parent.parent
    found = [*root.rglob("*.py"), *root.rglob("*.c")]
    return sorted(f for f in found if f.relative_to(root).parts[0] != "load" and "__pycache__" not in f.parts)


@functools.cache
def build_side_hash() -> str:
    """Hash of :func:`build_side_files`: a development build of aot-build whose version did not
    change must not reuse libraries (or an evaluator) an older build of it made."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for f in build_side_files():
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()
