"""``build_aot``: the setuptools command that compiles entries into ``build_lib``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import ClassVar

from setuptools import Command
from setuptools.errors import SetupError

from .. import backends
from ..build_config import BuildConfig
from ..constants import ARTIFACT_DIR, ENV_MANYLINUX, ENV_PREBUILT, MANIFEST_NAME
from ..discover import list_modules
from ..errors import ConfigError, ManifestError
from ..load.artifacts import verify
from ..manifest import Manifest
from ..native.elf import ElfError, read_dynamic
from ..native.platform_tag import PlatformTagError, floor_tag, torch_provided_libs
from ..settings import Settings, cache_dir, parse_jobs
from ..targets import machine
from ..toolchain import parse_floor


def checked_prebuilt(folder: Path) -> Path:
    """``folder`` as given by AOT_BUILD_PREBUILT (artifacts built by ``python -m aot_build
    assemble``, e.g. by the Bazel rules), once every manifest in it reads and every file it
    lists is there with its sha256."""
    manifests = sorted(folder.rglob(f"{ARTIFACT_DIR}/{MANIFEST_NAME}"))
    if not manifests:
        raise SetupError(
            f"aot-build: {ENV_PREBUILT}={folder}: no {ARTIFACT_DIR}/{MANIFEST_NAME} under it; point "
            "it at the output folder of python -m aot_build assemble"
        )
    for path in manifests:
        try:
            manifest = Manifest.read(path)
        except ManifestError as exc:
            raise SetupError(f"aot-build: {ENV_PREBUILT}: {exc}") from exc
        for name, record in manifest.files.items():
            problem = verify(path.parent / name, record.sha256)
            if problem:
                raise SetupError(f"aot-build: {ENV_PREBUILT}: {path}: {problem}; no wheel was written")
    return folder


def wheel_platform(libs: list[Path], floor: str = "host") -> str:
    """The manylinux tag of a wheel shipping ``libs``, torch's own libraries counted as
    provided by the wheel's ``torch`` requirement (so none is bundled): ``floor``'s
    (``"2_28"``: manylinux_2_28) when they meet it, else a SetupError naming each symbol that
    needs more; with ``"host"``, the most compatible tag they allow."""
    try:
        return floor_tag([read_dynamic(p) for p in libs], torch_provided_libs(), parse_floor(floor))
    except (ElfError, PlatformTagError) as exc:
        raise SetupError(f"aot-build: cannot tag the wheel: {exc}; no wheel was written") from exc


def native_files(manifest: Manifest) -> set[str]:
    """The files of ``manifest`` that are native code: its guard evaluator and the artifacts
    of backends that declare so (:attr:`aot_build.backends.Capabilities.native`)."""
    found = {manifest.evaluator} if manifest.evaluator else set()
    for entry in manifest.entries.values():
        for variant in entry.variants:
            for a in variant.artifacts:
                try:
                    native = backends.capabilities(backends.find(a.backend)).native
                except (backends.UnknownBackend, TypeError) as exc:
                    raise SetupError(f"aot-build: cannot tag the wheel: {exc}; no wheel was written") from exc
                if native:
                    found.add(a.file)
    return found


def artifacts_platform(build_lib: Path, floor: str = "host") -> str | None:
    """The wheel's platform tag from the artifacts under ``build_lib`` (each package's
    manifest says which files are native code, :func:`native_files`): the native files'
    (:func:`wheel_platform` with ``floor``); for artifacts that are all of other backends (the
    dynamo backend's C++ source, a third-party backend's files) the oldest manylinux policy of
    this architecture (they are tied to the architecture and the interpreter, not to a glibc);
    None when it ships no artifact."""
    native: list[Path] = []
    others = False
    for path in sorted(build_lib.rglob(f"{ARTIFACT_DIR}/{MANIFEST_NAME}")):
        try:
            manifest = Manifest.read(path)
        except ManifestError as exc:
            raise SetupError(f"aot-build: cannot tag the wheel: {exc}; no wheel was written") from exc
        names = native_files(manifest)
        native += [path.parent / name for name in sorted(names)]
        others = others or bool(set(manifest.files) - names)
    if native:
        return wheel_platform(native, floor)
    return f"manylinux_2_17_{machine()}" if others else None


class build_aot(Command):
    """Compile every ``@aot_entry`` of the distribution for every configured target."""

    description = "compile @aot_entry functions ahead of time (aot-build)"
    user_options: ClassVar[list[tuple[str, str | None, str]]] = []
    #: Set per distribution: the hook registers a subclass of this command for each one
    #: (:func:`for_project`), so two projects built in one process never share settings.
    settings: ClassVar[Settings] = Settings()
    #: The folder of the project's pyproject.toml (relative cache-dir is resolved from it).
    project_dir: ClassVar[Path] = Path()

    def initialize_options(self) -> None:
        #: The wheel's platform tag, from the libraries this run shipped (None: it shipped none).
        self.platform_tag: str | None = None
        self.build_lib: str | None = None
        # setuptools sets this for PEP 660 editable installs.
        self.editable_mode = False
        self.outputs: list[str] = []

    def finalize_options(self) -> None:
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))

    def get_outputs(self) -> list[str]:
        return self.outputs

    def run(self) -> None:
        if self.editable_mode:
            print("aot-build: editable install: entries run as plain Python (no artifacts built)")
            return
        build_py = self.get_finalized_command("build_py")
        packages = list(build_py.packages or [])
        assert self.build_lib is not None
        build_lib = Path(self.build_lib).resolve()
        modules = self.settings.modules or list_modules(build_lib, packages, self.settings.exclude)
        modules += [m for m in (build_py.py_modules or []) if m not in modules]
        targets = self.settings.targets
        wheel_cmd = self.distribution.command_obj.get("bdist_wheel")
        override = getattr(wheel_cmd, "aot_build_targets", None)
        if override:  # -C--build-option=--aot-build-targets=...: highest precedence
            targets = [t.strip() for t in override.split(",") if t.strip()]
        jobs = self.settings.jobs
        jobs_option = getattr(wheel_cmd, "aot_build_jobs", None)
        if jobs_option:  # -C--build-option=--aot-build-jobs=N
            try:
                jobs = parse_jobs(jobs_option.strip(), "--aot-build-jobs")
            except ConfigError as exc:
                raise SetupError(f"aot-build: {exc}") from exc
        cache = cache_dir(self.settings, self.project_dir)
        prebuilt = os.environ.get(ENV_PREBUILT, "").strip()
        with tempfile.TemporaryDirectory(prefix="aot-build-") as tmp:
            if prebuilt:
                staging = checked_prebuilt(Path(prebuilt))
                print(f"aot-build: {ENV_PREBUILT}: shipping the artifacts built in {staging}")
            else:
                staging = Path(tmp) / "out"
                staging.mkdir()
                self.compile(build_lib, packages, modules, targets, jobs, cache, staging)
            for stale in list(build_lib.rglob(ARTIFACT_DIR)):  # of an earlier build
                shutil.rmtree(stale)
            # One _aot_build folder per package root (namespace packages hold none).
            for src in sorted(staging.rglob(ARTIFACT_DIR)):
                dest = build_lib / src.relative_to(staging)
                dest.mkdir(parents=True)
                for f in sorted(src.iterdir()):
                    # contents only: modes and times of the build's own files (a Bazel
                    # output is read-only) would make wheels differ
                    shutil.copyfile(f, dest / f.name)
                    (dest / f.name).chmod(0o644)
                    self.outputs.append(str(dest / f.name))
            self.platform_tag = artifacts_platform(build_lib, self.settings.manylinux)
            if self.platform_tag:
                host = self.settings.manylinux == "host"
                why = "what its artifacts need" if host else "the manylinux floor"
                print(f"aot-build: wheel platform tag {self.platform_tag} ({why})")

    def compile(
        self,
        build_lib: Path,
        packages: list[str],
        modules: list[str],
        targets: list[str],
        jobs: int,
        cache: Path | None,
        staging: Path,
    ) -> None:
        """Run the compile child process (see aot_build.compile.driver) into ``staging``."""
        config = BuildConfig.from_settings(
            self.settings,
            build_lib=build_lib,
            packages=packages,
            modules=modules,
            targets=targets,
            jobs=jobs,
            cache_dir=cache,
            out_dir=staging,
        )
        path = staging.parent / "job.json"
        config.write(path)
        # the floor reaches the compile wrapper (and the build cache's key) as its variable;
        # the child imports the project from build_lib, which becomes the wheel: no bytecode
        # may be written there (it would ship, and differ between builds)
        env = {**os.environ, ENV_MANYLINUX: self.settings.manylinux, "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.run(
            [sys.executable, "-m", "aot_build.compile", str(path)], cwd=staging.parent, env=env
        )
        if proc.returncode != 0:
            raise SetupError(
                "aot-build: compiling @aot_entry functions failed (see the message above); "
                "no wheel was written"
            )


def for_project(settings: Settings, project_dir: Path) -> type[build_aot]:
    """The ``build_aot`` command of one project: its settings and folder on a subclass of its
    own (a distribution's ``cmdclass`` entry), never on the shared class."""
    return type("build_aot", (build_aot,), {"settings": settings, "project_dir": project_dir})
