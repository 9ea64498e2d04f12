"""The Bazel rules (rules/aot_build.bzl) end to end: rules/example builds example_pkg's wheel
with one action per entry (export) and per entry x target (compile).

One cold build serves every test of the module: its wheel is the wheel ``python -m build``
makes of the same project (same targets, same SOURCE_DATE_EPOCH, an empty aot-build cache),
byte for byte; after ``bazel clean`` a build with the same --disk_cache runs no action at all.
With nginx installed, the cold build also fills a real HTTP remote cache (nginx with WebDAV,
rules/http_cache.py, started by the fixture), from which a second checkout at another path,
with its own output base, builds the same wheel without running any action.

Without ``bazel`` on PATH the module is skipped, except under CI (the environment variable CI
set), which installs Bazel (.ci/run: apt-get install bazel-bootstrap) and must run it. Without
nginx only the remote-cache test is skipped.
"""

from __future__ import annotations

import importlib.util
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
from conftest import COLD_EPOCH, COLD_TARGETS
from helpers import EXAMPLE_PROJECT, REPO_ROOT, BuiltDists, copy_project, run

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


def _http_cache_module() -> Any:
    """rules/http_cache.py (the rules folder is no Python package)."""
    spec = importlib.util.spec_from_file_location("aot_rules_http_cache", RULES / "http_cache.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _checkout(dest: Path) -> None:
    """rules/ (with its example workspace) and example_pkg under ``dest``, as in the repository."""
    shutil.copytree(
        RULES, dest / "rules", ignore=shutil.ignore_patterns("bazel-*", "user.bazelrc", "__pycache__")
    )
    copy_project(EXAMPLE_PROJECT, dest / "example_pkg")


@dataclass
class Workspace:
    """A copy of rules/ (with its example workspace) and example_pkg, laid out as in the
    repository, and one Bazel server for it (its own output root, shut down and removed at the
    end). Builds use ``tmp/disk-cache`` unless ``disk_cache`` is off, and ``remote_cache`` (a
    URL) when given."""

    bazel: str
    tmp: Path
    disk_cache: bool = True
    remote_cache: str | None = None
    #: The nginx cache server (rules/http_cache.py's HttpCache) behind ``remote_cache``.
    http_cache: Any = None
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
            f"--repo_env=AOT_BUILD_PYTHON={sys.executable}",
            *([f"--disk_cache={self.tmp / 'disk-cache'}"] if self.disk_cache else []),
            *([f"--remote_cache={self.remote_cache}"] if self.remote_cache else []),
            "--color=no",
            "--curses=no",
            *options,
        ]
        proc = run(cmd, cwd=self.example, timeout=1500, check=check)
        return proc.stdout + proc.stderr

    def wheel(self) -> Path:
        (wheel,) = (self.example / "bazel-bin" / "example_pkg_wheel").glob("*.whl")
        return wheel

    def shutdown(self) -> None:
        run([*self.startup(), "shutdown"], cwd=self.example, check=False)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    bazel = _bazel_or_skip()
    tmp = tmp_path_factory.mktemp("bazel")
    _checkout(tmp)
    http = _http_cache_module()
    cache = http.HttpCache(tmp / "http-cache").start() if http.nginx_binary() else None
    ws = Workspace(bazel, tmp, remote_cache=cache.url if cache else None, http_cache=cache)
    try:
        yield ws
    finally:
        ws.shutdown()
        if cache is not None:
            cache.stop()
        # Bazel's output tree is read-only; it holds outputs, caches and Bazel's own install
        run(["chmod", "-R", "u+w", tmp], cwd=tmp.parent, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def cold_build(workspace: Workspace) -> str:
    """The first build (empty disk and remote caches): every action runs, one per entry
    (export) and one per entry and target (compile), the entries check, assemble and wheel."""
    log_file = workspace.tmp / "cold-exec.json"
    t0 = time.perf_counter()
    log = workspace.build(f"--execution_log_json_file={log_file}")
    workspace.times["cold"] = time.perf_counter() - t0
    ran = [s["mnemonic"] for s in _spawns(log_file) if not s.get("remoteCacheHit")]
    assert sorted(ran) == sorted(
        ["AotExport"] * ENTRIES
        + ["AotCompile"] * ENTRIES * len(TARGETS)
        + ["AotEntries", "AotAssemble", "AotWheel"]
    ), log
    return log


def _members(wheel: Path) -> dict[str, tuple[bytes, tuple[Any, ...]]]:
    with zipfile.ZipFile(wheel) as zf:
        return {
            i.filename: (zf.read(i), (i.date_time, i.external_attr, i.compress_type)) for i in zf.infolist()
        }


def test_bazel_wheel_is_the_python_build_wheel(
    workspace: Workspace, cold_build: str, cold_wheel: BuiltDists
) -> None:
    """The whole wheel Bazel makes (names, contents, timestamps, modes: every byte) is the one
    python -m build makes of the project (conftest ``cold_wheel``: same targets and
    SOURCE_DATE_EPOCH, empty caches): the compile actions' libraries are reproducible and the
    wheel action adds nothing of its own."""
    assert f"DEFAULT_SOURCE_DATE_EPOCH = {COLD_EPOCH}" in (RULES / "aot_build.bzl").read_text()
    ours = workspace.wheel()
    ref = cold_wheel.wheel
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


def test_no_change_rebuild_runs_nothing(workspace: Workspace, cold_build: str) -> None:
    """Building again with nothing changed (the server up, its action cache current) runs no
    action: no export, no compile, no entries check, no wheel."""
    log_file = workspace.tmp / "no-change-exec.json"
    t0 = time.perf_counter()
    log = workspace.build(f"--execution_log_json_file={log_file}")
    workspace.times["no change"] = time.perf_counter() - t0
    ran = [s.get("mnemonic") for s in _spawns(log_file)]
    assert not ran, f"a no-change rebuild ran {ran}\n{log}"
    print(
        f"bazel build: cold {workspace.times['cold']:.0f} s, no change {workspace.times['no change']:.1f} s "
        f"({100 * workspace.times['no change'] / workspace.times['cold']:.1f} % of cold)"
    )


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
    """Without --repo_env=AOT_BUILD_PYTHON the repository rule aot_toolchain() fails and says
    what to set."""
    cmd = [*workspace.startup(), "build", "--nobuild", "--color=no", "--curses=no", "//:wheel"]
    proc = run(cmd, cwd=workspace.example, check=False)
    assert proc.returncode != 0
    assert "--repo_env=AOT_BUILD_PYTHON=" in proc.stderr, proc.stderr


def test_toolchain_mismatch_is_a_clear_error(tmp_path: Path) -> None:
    """Every action checks the toolchain it runs with against the id aot_toolchain() computed
    (an input of every action, so part of every cache key) and fails, saying how to fix it,
    when they differ (a changed interpreter, a worker with another image)."""
    tool = RULES / "aot_action.py"
    actual = run([sys.executable, tool, "toolchain-id"], cwd=tmp_path).stdout.strip()
    assert re.fullmatch(r"py3\.\d+-torch\S+-aot\S+-[0-9a-f]{16}", actual), actual
    bogus = tmp_path / "toolchain_id"
    bogus.write_text("py3.11-torch0.0-aot0.0-0000000000000000\n")
    cmd: list[str | Path] = [sys.executable, tool, "assemble", "--scratch", tmp_path / "s"]
    proc = run([*cmd, "--toolchain-id", bogus, "--out", tmp_path / "out"], cwd=tmp_path, check=False)
    assert proc.returncode == 1, proc.stderr
    assert f"the toolchain is {actual}" in proc.stderr, proc.stderr
    assert "but the build's is py3.11-torch0.0-aot0.0-0000000000000000" in proc.stderr, proc.stderr
    assert "bazel sync --only=aot_toolchain" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "s").exists()


def test_entries_list_must_match_the_package(workspace: Workspace, cold_build: str) -> None:
    """BUILD's entries must be exactly the package's @aot_entry functions: with one left out
    and one that is no entry, the build fails before assembling, naming both (the missing one
    with its file and function) and the list to write; no artifacts, no wheel."""
    build = workspace.example / "BUILD"
    original = build.read_text()
    edited = original.replace('        "example_pkg.preprocess:normalize",\n', "").replace(
        '"example_pkg.blocks:mlp_block",\n',
        '"example_pkg.blocks:mlp_block",\n        "example_pkg.blocks:no_such_block",\n',
    )
    assert "normalize" not in edited and "no_such_block" in edited, edited
    log_file = workspace.tmp / "entries-exec.json"
    try:
        build.write_text(edited)
        out = workspace.build(f"--execution_log_json_file={log_file}", "--keep_going", check=False)
    finally:
        build.write_text(original)
    assert "Build did NOT complete successfully" in out, out
    assert "differ from the project's @aot_entry functions" in out, out
    missing = re.search(r"missing: (.*)", out)
    assert missing and "preprocess.py" in missing[1] and "normalize" in missing[1], out
    assert 'add "example_pkg.preprocess:normalize"' in out, out
    assert 'extra: "example_pkg.blocks:no_such_block" is no @aot_entry of the project: remove it' in out, out
    assert '"example_pkg.preprocess:normalize",' in out.partition("the list to write")[2], out
    ran = {s.get("mnemonic") for s in _spawns(log_file)}
    assert "AotEntries" in ran and not ran & {"AotAssemble", "AotWheel"}, ran


def test_second_checkout_from_remote_cache(workspace: Workspace, cold_build: str) -> None:
    """A second checkout of the repository at another path, with its own Bazel output base and
    no disk cache, builds the wheel from the HTTP remote cache the cold build filled (nginx,
    started by the fixture): every action is a remote cache hit, none runs, the wheel is the
    same bytes. No path of either checkout, nor the interpreter's, is in any action's command
    line or environment (they would be in its key)."""
    if workspace.http_cache is None:
        pytest.skip(
            "nginx is not installed (Debian/Ubuntu: apt-get install nginx): this test serves a real "
            "HTTP remote cache with it (rules/http_cache.py); CI installs it (.ci/run)"
        )
    other = Workspace(workspace.bazel, workspace.tmp / "elsewhere" / "checkout", disk_cache=False)
    other.remote_cache = workspace.remote_cache
    _checkout(other.tmp)
    before = len(workspace.http_cache.requests())
    log_file = workspace.tmp / "second-checkout-exec.json"
    try:
        t0 = time.perf_counter()
        log = other.build(f"--execution_log_json_file={log_file}")
        workspace.times["second checkout"] = time.perf_counter() - t0
        wheel = other.wheel().read_bytes()
    finally:
        other.shutdown()
    spawns = _spawns(log_file)
    aot = [s for s in spawns if s.get("mnemonic", "").startswith("Aot")]
    assert len(aot) == ENTRIES + ENTRIES * len(TARGETS) + 3, spawns
    missed = [s for s in aot if not s.get("remoteCacheHit")]
    assert not missed, f"actions ran instead of coming from the remote cache: {missed}\n{log}"
    summary = _spawn_summary(log)
    assert "remote cache hit" in summary and "linux-sandbox" not in summary, log
    assert " local" not in summary and "processwrapper-sandbox" not in summary, log
    assert wheel == workspace.wheel().read_bytes()
    served = [(m, path, status) for m, path, status in workspace.http_cache.requests()[before:]]
    assert any(m == "GET" and p.startswith("/ac/") and st == 200 for m, p, st in served), served
    keys = json.dumps([[s.get("commandArgs"), s.get("environmentVariables")] for s in aot])
    for leak in (str(workspace.tmp), str(Path(sys.executable).parent), str(REPO_ROOT)):
        assert leak not in keys, f"{leak} is in an action's command line or environment: {keys}"
    print(
        f"bazel build: cold {workspace.times['cold']:.0f} s, second checkout from the remote cache "
        f"{workspace.times['second checkout']:.1f} s"
    )
