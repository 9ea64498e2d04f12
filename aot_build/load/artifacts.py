"""Find a package's manifest and its guard evaluator, checking every file against its hash
(backends load their own files: :mod:`aot_build.backends`)."""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import threading
from pathlib import Path
from typing import Any

from ..constants import ARTIFACT_DIR, MANIFEST_NAME
from ..manifest import Manifest

_MANIFESTS: dict[str, Manifest | None] = {}
_EVALUATORS: dict[str, Any] = {}
_LOCK = threading.Lock()


def artifact_dir(package: str) -> Path | None:
    """``<package>/_aot_build`` of an imported package (see :func:`names.package_root`), or None."""
    mod = sys.modules.get(package)
    paths = list(getattr(mod, "__path__", []) or [])
    for p in paths:
        d = Path(p) / ARTIFACT_DIR
        if (d / MANIFEST_NAME).is_file():
            return d
    return None


def manifest_folder(manifest: Manifest) -> Path | None:
    """The folder the shim read ``manifest`` from, where its artifacts are (found once, by
    :func:`manifest_for`), or None for a manifest read from elsewhere (inside a wheel)."""
    return manifest.folder if isinstance(manifest.folder, Path) else None


def manifest_for(package: str) -> Manifest | None:
    """The package's manifest (read once), or None when the package has none (source tree,
    editable install). Raises ManifestError when one exists but cannot be used."""
    with _LOCK:
        if package not in _MANIFESTS:
            d = artifact_dir(package)
            _MANIFESTS[package] = Manifest.read(d / MANIFEST_NAME, lazy=True) if d else None
        return _MANIFESTS[package]


def evaluator_for(package: str, manifest: Manifest) -> Any:
    """The package's compiled guard evaluator (loaded once, after checking its hash), or None
    when it ships none or it cannot be loaded here: guards are then checked in Python."""
    with _LOCK:
        if package not in _EVALUATORS:
            _EVALUATORS[package] = _load_evaluator(manifest)
        return _EVALUATORS[package]


def _load_evaluator(manifest: Manifest) -> Any:
    folder = manifest_folder(manifest)
    record = manifest.files.get(manifest.evaluator) if manifest.evaluator else None
    if folder is None or record is None:
        return None
    path = folder / manifest.evaluator
    if verify(path, record.sha256) is not None:
        return None
    from ..guards import native

    try:
        return native.load(path)
    except ImportError:
        return None


def verify(path: Path, sha256: str) -> str | None:
    """None when ``path`` is a file inside its artifact folder with the expected hash, else
    what is wrong. A symbolic link is followed only while it stays inside the folder."""
    try:
        real = path
        if not stat.S_ISREG(os.lstat(path).st_mode):  # a plain file needs no resolving (µs per dir)
            real = path.resolve(strict=True)
            if real.parent != path.parent.resolve(strict=True) or not real.is_file():
                return f"artifact {path.name} is not a plain file in {path.parent} (it leads to {real})"
        digest = _sha256(real)
    except OSError as exc:
        return f"artifact {path.name} is missing or unreadable ({exc.strerror})"
    if digest != sha256:
        return f"artifact {path.name} is damaged (sha256 differs from the manifest)"
    return None


def _sha256(path: Path) -> str:
    """The file's sha256, read in 64 KiB blocks into one buffer: reading a 1 MB library whole
    into a new bytes object cost 0.7 ms more (page faults on the fresh allocation, 2026-12-06)."""
    h = hashlib.sha256()
    buf = bytearray(1 << 16)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
