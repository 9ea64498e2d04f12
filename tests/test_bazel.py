"""The Bazel rules (rules/aot_build.bzl) end to end: rules/example builds example_pkg's wheel
with one action per entry (export) and per entry x target (compile).

One cold build serves every test of the module: its wheel is the wheel ``python -m build``
makes of the same project (same targets, same SOURCE_DATE_EPOCH, an empty aot-build cache),
byte for byte; after ``bazel clean`` a build with the same --disk_cache runs no action at all.

Without ``bazel`` on PATH the module is skipped, except under CI (the environment variable CI
set), which installs Bazel (.ci/run: apt-get install bazel-bootstrap) and must run it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import COLD_EPOCH, COLD_TARGETS, ColdWheel
from helpers import EXAMPLE_PROJECT, REPO_ROOT, copy_project, run

pytestmark = pytest.mark.e2e

RULES = REPO_ROOT / "rules"
#: What the example's targets are (rules/example/BUILD): pyproject's ["cpu"] on x86_64.
TARGETS = tuple(COLD_TARGETS.split(","))
ENTRIES = 4
ARTIFACTS = "example_pkg/_aot_build/"


def _bazel_or_skip() -> str:
    bazel = shutil.which("bazel")
    if bazel:
        return bazel
    if os.environ.get("CI"):
        pytest.fail(
            "bazel is not on PATH, and CI is set: CI installs it (.ci/run: apt-get install bazel-bootstrap)"
        )
    pytest.skip("bazel is not on PATH (Debian/Ubuntu: apt-get install bazel-bootstrap); CI runs these tests")


@dataclass
class Workspace:
    """A copy of rules/ (with its example workspace) and example_pkg, laid out as in the
    repository, and one Bazel server for it (its own output root, shut down and removed at the end)."""

    bazel: str
    tmp: Path
    times: dict[str, float] = field(default_factory=dict)

    @property
    def example(self) -> Path:
        return self.tmp / "rules" / "example"

    def startup(self) -> list[str]:
        # --nohome_rc: nothing from the user's ~/.bazelrc; the system one stays (Debian's
        # install_base). An idle server goes away by itself should the shutdown be missed.
        return [
            self.bazel,
            f"--output_user_root={self.tmp / 'bazel-root'}",
            "--nohome_rc",
            "--max_idle_secs=300",
        ]

    def build(self, *options: str, target: str = "//:wheel", check: bool = True) -> str:
        cmd = [
            *self.startup(),
            "build",
            target,
            f"--define=AOT_BUILD_PYTHON={sys.executable}",
            f"--disk_cache={self.tmp / 'disk-cache'}",
            "--color=no",
            "--curses=no",
            *options,
        ]
        proc = run(cmd, cwd=self.example, timeout=1500, check=check)
        return proc.stdout + proc.stderr

    def wheel(self) -> Path:
        (wheel,) = (self.example / "bazel-bin" / "example_pkg_wheel").glob("*.whl")
        return wheel


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    bazel = _bazel_or_skip()
    tmp = tmp_path_factory.mktemp("bazel")
    shutil.copytree(
        RULES, tmp / "rules", ignore=shutil.ignore_patterns("bazel-*", "user.bazelrc", "__pycache__")
    )
    copy_project(EXAMPLE_PROJECT, tmp / "example_pkg")
    ws = Workspace(bazel, tmp)
    try:
        yield ws
    finally:
        run([*ws.startup(), "shutdown"], cwd=ws.example, check=False)
        # Bazel's output tree is read-only; it holds outputs, caches and Bazel's own install
        run(["chmod", "-R", "u+w", tmp], cwd=tmp.parent, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def cold_build(workspace: Workspace) -> str:
    """The first build (empty disk cache): every action runs, one per entry (export) and one
    per entry and target (compile)."""
    log_file = workspace.tmp / "cold-exec.json"
    t0 = time.perf_counter()
    log = workspace.build(f"--execution_log_json_file={log_file}")
    workspace.times["cold"] = time.perf_counter() - t0
    ran = [s["mnemonic"] for s in _spawns(log_file) if not s.get("remoteCacheHit")]
    assert sorted(ran) == sorted(
        ["AotExport"] * ENTRIES + ["AotCompile"] * ENTRIES * len(TARGETS) + ["AotAssemble", "AotWheel"]
    ), log
    return log


def _members(wheel: Path) -> dict[str, tuple[bytes, tuple[Any, ...]]]:
    with zipfile.ZipFile(wheel) as zf:
        return {
            i.filename: (zf.read(i), (i.date_time, i.external_attr, i.compress_type)) for i in zf.infolist()
        }


def test_bazel_wheel_is_the_python_build_wheel(
    workspace: Workspace, cold_build: str, cold_wheels: tuple[ColdWheel, ColdWheel]
) -> None:
    """The whole wheel Bazel makes (names, contents, timestamps, modes: every byte) is the one
    python -m build makes of the project (conftest ``cold_wheels``: same targets and
    SOURCE_DATE_EPOCH, empty caches): the compile actions' libraries are reproducible and the
    wheel action adds nothing of its own."""
    assert f"DEFAULT_SOURCE_DATE_EPOCH = {COLD_EPOCH}" in (RULES / "aot_build.bzl").read_text()
    ours = workspace.wheel()
    ref = cold_wheels[0].wheel
    assert ours.name == ref.name
    a, b = _members(ours), _members(ref)
    artifacts = sorted(n for n in b if n.startswith(ARTIFACTS))
    assert any(n.endswith(".so") for n in artifacts), sorted(b)
    assert sorted(n for n in a if n.startswith(ARTIFACTS)) == artifacts
    differ = [n for n in artifacts if a[n][0] != b[n][0]]
    assert not differ, f"artifacts differ from python -m build's: {differ}"
    differ = [n for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
    assert not differ, f"wheel members differ (content or zip metadata): {differ}"
    assert ours.read_bytes() == ref.read_bytes()


def _spawn_summary(log: str) -> str:
    """Bazel's ``INFO: N processes: ...`` line."""
    found = re.findall(r"^INFO: \d+ process(?:es)?: .*$", log, re.MULTILINE)
    return found[-1] if found else ""


def _spawns(path: Path) -> list[dict[str, Any]]:
    """The spawns of --execution_log_json_file (a stream of JSON objects)."""
    text, pos = path.read_text(), 0
    out: list[dict[str, Any]] = []
    decoder = json.JSONDecoder()
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return out
        obj, pos = decoder.raw_decode(text, pos)
        out.append(obj)


def test_warm_disk_cache_compiles_nothing(workspace: Workspace, cold_build: str) -> None:
    """After ``bazel clean``, the same build with the same --disk_cache takes every action's
    outputs from the cache: no export, no compile, no wheel build runs."""
    first = workspace.wheel().read_bytes()
    run([*workspace.startup(), "clean"], cwd=workspace.example)
    log_file = workspace.tmp / "warm-exec.json"
    t0 = time.perf_counter()
    log = workspace.build(f"--execution_log_json_file={log_file}")
    workspace.times["warm"] = time.perf_counter() - t0
    spawns = _spawns(log_file)
    compiles = [s for s in spawns if s.get("mnemonic") == "AotCompile"]
    assert len(compiles) == ENTRIES * len(TARGETS), spawns
    missed = [s for s in spawns if s.get("mnemonic", "").startswith("Aot") and not s.get("remoteCacheHit")]
    assert not missed, f"actions ran instead of coming from the disk cache: {missed}\n{log}"
    summary = _spawn_summary(log)
    assert "cache hit" in summary and "linux-sandbox" not in summary and "local" not in summary, log
    assert workspace.wheel().read_bytes() == first
    print(
        f"bazel build: cold {workspace.times['cold']:.0f} s, warm after clean {workspace.times['warm']:.1f} s"
    )


def test_missing_interpreter_is_a_clear_error(workspace: Workspace) -> None:
    """Without --define=AOT_BUILD_PYTHON the analysis fails and says what to set."""
    cmd = [*workspace.startup(), "build", "--nobuild", "--color=no", "--curses=no", "//:wheel"]
    proc = run(cmd, cwd=workspace.example, check=False)
    assert proc.returncode != 0
    assert "--define=AOT_BUILD_PYTHON=" in proc.stderr, proc.stderr


def test_toolchain_mismatch_is_a_clear_error(workspace: Workspace) -> None:
    """--define=AOT_BUILD_TOOLCHAIN (which enters every action's key) is checked against the
    interpreter's torch/aot-build/compiler before a step runs; the error gives the right value."""
    proc = run([sys.executable, RULES / "aot_action.py", "toolchain-id"], cwd=workspace.tmp)
    actual = proc.stdout.strip()
    assert re.fullmatch(r"py3\.\d+-torch\S+-aot\S+-[0-9a-f]{16}", actual), actual
    out = workspace.build(
        "--define=AOT_BUILD_TOOLCHAIN=torch0.0-bogus", "--jobs=1", target="//:artifacts", check=False
    )
    assert "--define=AOT_BUILD_TOOLCHAIN=torch0.0-bogus, but this machine's toolchain" in out, out
    assert f"build --define=AOT_BUILD_TOOLCHAIN={actual}" in out, out
    assert "Build did NOT complete successfully" in out, out
