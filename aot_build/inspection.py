"""``python -m aot_build inspect``: what a wheel or an installed package ships, and what this
host would load from it."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path
from typing import Any

from .constants import ARTIFACT_DIR, MANIFEST_NAME
from .errors import ManifestError
from .manifest import Manifest
from .targets import (
    CPU_FEATURES,
    Target,
    best_cpu_target,
    compile_options,
    host_cpu_targets,
    machine,
    missing_features,
)


def read_manifests(target: str) -> list[tuple[str, Manifest]]:
    """Manifests of a wheel file, a package folder, or an installed package's name."""
    path = Path(target)
    if path.suffix == ".whl" and path.is_file():
        with zipfile.ZipFile(path) as zf:
            names = [n for n in zf.namelist() if n.endswith(f"/{ARTIFACT_DIR}/{MANIFEST_NAME}")]
            out = []
            for n in names:
                folder = zipfile.Path(zf, n.rsplit("/", 1)[0] + "/")
                where = f"{path}!{n}"
                out.append((where, Manifest.from_dict(json.loads(zf.read(n)), where, folder=folder)))
            return out
    if path.is_dir():
        found = sorted(path.glob(f"**/{ARTIFACT_DIR}/{MANIFEST_NAME}"))
        return [(str(p), Manifest.read(p)) for p in found]
    try:
        spec = importlib.util.find_spec(target)  # finds the folder without importing it
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ManifestError(
            f"{target!r} is neither a .whl file, a folder, nor an installed package; "
            "pass a wheel path or the import name of an installed package"
        )
    manifests = []
    for loc in spec.submodule_search_locations:
        p = Path(loc) / ARTIFACT_DIR / MANIFEST_NAME
        if p.is_file():
            manifests.append((str(p), Manifest.read(p)))
    return manifests


def needs(target: str, arch: str) -> dict[str, Any]:
    """What a CPU target's code requires of a host: its -march level and CPU features."""
    march = compile_options(Target(target, "cpu"), arch).get("cpp.march") or f"{arch} default"
    return {"march": march, "features": sorted(CPU_FEATURES.get(arch, {}).get(target, ()))}


def describe(manifests: list[tuple[str, Manifest]], host: tuple[str, ...] | None) -> dict[str, Any]:
    """A JSON-able summary; ``host`` is this host's runnable CPU targets, or None (unknown)."""
    packages = []
    for where, m in manifests:
        entries = []
        for key, e in sorted(m.entries.items()):
            for i, v in enumerate(e.variants):
                cpu = {a.target for a in v.artifacts if a.device == "cpu" and a.role == "inference"}
                same_host = m.machine == machine()
                loads = best_cpu_target(cpu, host) if host is not None and same_host else None
                entries.append(
                    {
                        "entry": key,
                        "variant": i,
                        "method": e.method,
                        "source": e.source,
                        "signature": v.signature(),
                        "input_set": v.input_set,
                        "size_one": v.size_one,
                        "symbols": {k: list(r) for k, r in v.symbols.items()},
                        "inputs": [
                            {"name": v.label(j), "dims": list(lf.tensor.dims), "dtype": lf.tensor.dtype}
                            if lf.tensor
                            else {"name": v.label(j), "value": lf.value}
                            for j, lf in enumerate(v.leaves)
                        ],
                        "weights": len(v.state.weights),
                        "guards": sum(v.state.count().values()),
                        "embedded_constants": len(v.embedded_constants),
                        "artifacts": [
                            {
                                "target": a.target,
                                "device": a.device,
                                "backend": a.backend,
                                "backend_version": a.backend_version,
                                "role": a.role,
                                "file": a.file,
                                "size": m.files[a.file].size if a.file in m.files else None,
                                "isa": a.isa,
                                "needs": needs(a.target, m.machine) if a.device == "cpu" else None,
                                "host_lacks": sorted(missing_features(a.target, m.machine))
                                if a.device == "cpu" and same_host
                                else None,
                            }
                            for a in v.artifacts
                        ],
                        "this_host_loads": loads,
                    }
                )
        packages.append(
            {
                "manifest": where,
                "package": m.package,
                "torch": m.torch_version,
                "python": m.python_version,
                "machine": m.machine,
                "aot_build": m.aot_build_version,
                "format_version": m.read_version,
                "files": len(m.files),
                "bytes": sum(f.size for f in m.files.values()),
                "guard_evaluator": m.evaluator or None,
                "skipped_targets": m.skipped_targets,
                "entries": entries,
            }
        )
    return {"host_cpu_targets": list(host) if host is not None else None, "packages": packages}


def render(info: dict[str, Any]) -> str:
    lines = [f"host CPU targets (best first): {', '.join(info['host_cpu_targets'] or ['unknown'])}"]
    for p in info["packages"]:
        lines.append(
            f"\n{p['package']}  torch {p['torch']}  python {p['python']}  {p['machine']}  "
            f"aot-build {p['aot_build']}  {p['files']} files, {p['bytes'] / 1e6:.2f} MB"
        )
        lines.append(f"  manifest: {p['manifest']}")
        for s in p["skipped_targets"]:
            lines.append(f"  skipped target {s['target']}: {s['reason']}")
        for e in p["entries"]:
            lines.append(
                f"  {e['entry']}  ({e['signature']})  weights: {e['weights']}, guards: {e['guards']}  "
                f"[{e['source']}]"
            )
            for a in e["artifacts"]:
                mark = "  <- this host loads" if a["target"] == e["this_host_loads"] else ""
                role = "" if a["role"] == "inference" else f" {a['role']}"
                if a["host_lacks"]:
                    mark += f"  (this CPU lacks {', '.join(a['host_lacks'])})"
                level = a["needs"]["march"] if a["needs"] else a["isa"]
                size = f"{a['size'] / 1e6:.2f} MB" if a["size"] is not None else "missing"
                lines.append(
                    f"    {a['target']:<14} {a['device']:<5} {size:>9}  {a['isa']:<22} {level:<10} "
                    f"{a['backend']}{role} {a['file']}{mark}"
                )
            if e["this_host_loads"] is None:
                lines.append("    (no artifact for this host's CPU: calls run as plain Python)")
    return "\n".join(lines)


def inspect_command(target: str, as_json: bool) -> str:
    manifests = read_manifests(target)
    if not manifests:
        raise ManifestError(f"{target}: no aot_build manifest found (not built with aot-build?)")
    try:
        host: tuple[str, ...] | None = host_cpu_targets()
    except ImportError:
        host = None
    info = describe(manifests, host)
    return json.dumps(info, indent=1) if as_json else render(info)
