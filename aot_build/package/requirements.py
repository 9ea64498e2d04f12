"""The wheel's run-time requirements: the exact torch its artifacts were built against, and an
aot-build whose reader understands the manifest it ships.

Static ``[project].dependencies`` are what the wheel says (PEP 621), so they are checked, never
rewritten; a build whose static list lacks a pin fails with the line to add. Only a project
that declares ``dependencies`` dynamic gets the pins supplied.
"""

from __future__ import annotations

from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement

from ..constants import MANIFEST_VERSION, READERS
from ..errors import ConfigError


def torch_release() -> str:
    """The torch release installed in the build environment, without local label."""
    try:
        return metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError as exc:
        raise ConfigError(
            "aot-build: torch is not installed in the build environment; add an exact "
            '"torch==X.Y.Z" to [build-system].requires in pyproject.toml'
        ) from exc


#: The aot-build requirement every wheel needs: a reader of the manifest format it ships.
SHIM_REQUIREMENT = f"aot-build>={READERS[MANIFEST_VERSION]}"


def _name(req: Requirement) -> str:
    return req.name.lower().replace("_", "-")


def _parse(line: str, where: str) -> Requirement:
    try:
        return Requirement(str(line))
    except InvalidRequirement as exc:
        raise ConfigError(f"{where}: dependency {line!r} is not a valid requirement: {exc}") from exc


def _too_old_readers(req: Requirement) -> list[str]:
    """aot-build releases ``req`` allows whose reader cannot read this build's manifests."""
    return [v for n, v in READERS.items() if n < MANIFEST_VERSION and req.specifier.contains(v, True)]


def _check_torch_range(req: Requirement, line: str, release: str, where: str) -> None:
    if req.specifier and not req.specifier.contains(release, prereleases=True):
        raise ConfigError(
            f"{where}: dependency {line!r} excludes torch {release}, the torch this wheel is built "
            f"with; pin the same release in [build-system].requires and dependencies"
        )


def check_static(dependencies: list[str], release: str, where: str) -> None:
    """Raise :class:`ConfigError` unless static ``dependencies`` pin exactly ``torch==release``
    and require an aot-build that reads this build's manifests; the message has the fix."""
    torch_ok = shim_ok = False
    problems: list[str] = []
    parsed = [(line, _parse(line, where)) for line in dependencies]
    for line, req in parsed:
        if _name(req) == "torch" and req.marker is None:
            _check_torch_range(req, line, release, where)
            specs = list(req.specifier)
            torch_ok = len(specs) == 1 and specs[0].operator in ("==", "===") and specs[0].version == release
            if not torch_ok:
                problems.append(f"{line!r} is not the exact pin the artifacts need")
        elif _name(req) == "aot-build" and req.marker is None:
            old = _too_old_readers(req)
            shim_ok = not old
            if old:
                problems.append(f"{line!r} allows aot-build {old[0]}, whose reader cannot load this wheel")
    if torch_ok and shim_ok:
        return
    missing = [r for r, ok in ((f"torch=={release}", torch_ok), (SHIM_REQUIREMENT, shim_ok)) if not ok]
    others = [line for line, req in parsed if _name(req) not in ("torch", "aot-build")]
    listed = ", ".join(f'"{d}"' for d in others)
    pins = f'"torch=={release}", "{SHIM_REQUIREMENT}"'
    line = "dependencies = [" + ", ".join([*([listed] if listed else []), pins]) + "]"
    why = f" ({'; '.join(problems)})" if problems else ""
    raise ConfigError(
        f"{where}: [project].dependencies must pin {' and '.join(missing)}{why}: the wheel's "
        f"artifacts run only with the torch they were built with, read by an aot-build that "
        f"knows manifest format {MANIFEST_VERSION}. Write:\n    {line}\n"
        f'or declare dynamic = ["dependencies"] and aot-build supplies both.'
    )


def supply(requires: list[str], release: str, where: str) -> list[str]:
    """Dynamic dependencies: ``requires`` with every unconditional torch requirement replaced by
    ``torch==release`` and the aot-build requirement added unless one is listed.

    A user range that excludes the build's torch is an error: the wheel could never be
    installed next to the torch its artifacts need.
    """
    out: list[str] = []
    shim = SHIM_REQUIREMENT
    for line in requires:
        req = _parse(line, where)
        if _name(req) == "torch" and req.marker is None:
            _check_torch_range(req, line, release, where)
            continue
        if _name(req) == "aot-build":
            old = _too_old_readers(req)
            if old and req.marker is None:
                raise ConfigError(
                    f"{where}: dependency {line!r} allows aot-build {old[0]}, whose reader cannot "
                    f"load this wheel's manifest (format {MANIFEST_VERSION}); require "
                    f"{SHIM_REQUIREMENT!r} or drop the line and aot-build adds it"
                )
            shim = ""
        out.append(str(line))
    return [*out, *([shim] if shim else []), f"torch=={release}"]
