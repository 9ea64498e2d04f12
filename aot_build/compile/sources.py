"""The fingerprint of aot_build's own build-side code (torch-free, so benchmark drivers can
use it too)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path


@functools.cache
def build_side_hash() -> str:
    """Hash of aot_build's sources that shape artifacts (all but the run-time ``load``): a
    development build of aot-build whose version did not change must not reuse libraries an
    older build of it made."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root)
        if rel.parts[0] != "load" and "__pycache__" not in rel.parts:
            h.update(str(rel).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()
