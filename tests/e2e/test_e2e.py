"""End to end, as users do it: build wheels with ``python -m build``, install them into a
fresh virtual environment, import and call from a neutral directory with no compiler on PATH.

The expensive steps (the aot-build wheel, example_pkg's isolated build, the environment)
are session fixtures in conftest.py and run once.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
import tomllib
from helpers import (
    EXAMPLE_PROJECT,
    SAMPLE_PROJECTS,
    TESTS_DIR,
    BuiltDists,
    Venv,
    build_env,
    build_sample,
    copy_project,
    isolated_env,
    run,
    wheel_manifest,
    wheel_metadata,
    wheel_names,
    wheel_tags,
)

EXAMPLE_ENTRIES = ["mlp_block", "attention_block", "normalize", "split_heads_stats"]
EXAMPLE_KEYS = {
    "example_pkg.blocks:mlp_block",
    "example_pkg.blocks:attention_block",
    "example_pkg.preprocess:normalize",
    "example_pkg.preprocess:split_heads_stats",
}


def check(venv: Venv, scenario: str, tmp_path: Path, arg: str = "", **env: str) -> dict[str, Any]:
    """Run installed_check.py SCENARIO in ``venv`` from an empty directory, with PATH holding
    only the venv's bin folder and an empty TORCHINDUCTOR_CACHE_DIR; return its facts."""
    script_dir = tmp_path / "script"
    script_dir.mkdir()
    script = shutil.copy2(TESTS_DIR / "installed_check.py", script_dir / "installed_check.py")
    neutral = tmp_path / "cwd"
    neutral.mkdir()
    cache = tmp_path / "inductor-cache"
    cache.mkdir()
    proc = run(
        [venv.python, script, scenario, *([arg] if arg else [])],
        cwd=neutral,
        env=isolated_env(venv, TORCHINDUCTOR_CACHE_DIR=str(cache), **env),
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT: ")]
    assert len(lines) == 1, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(lines[0].removeprefix("RESULT: "))
    assert list(neutral.iterdir()) == [], "the check wrote into its working directory"
    return result


def assert_compiled_call(facts: dict[str, Any], what: str) -> None:
    """The artifact answered (Python did not run), silently, with the eager result."""
    assert facts["warnings"] == [], f"{what}: {facts['warnings']}"
    assert facts["mismatch"] is None, f"{what}: differs from eager: {facts['mismatch']}"
    assert facts["ran_python"] is False, f"{what}: the Python function ran instead of the artifact"


def assert_one_fallback(facts: dict[str, Any], key: str, *fragments: str) -> str:
    """Python ran, with the eager result, after exactly one FallbackWarning naming ``key``."""
    assert facts["ran_python"] is True
    assert facts["mismatch"] is None, facts["mismatch"]
    assert len(facts["warnings"]) == 1, facts["warnings"]
    (w,) = facts["warnings"]
    assert w["category"] == "FallbackWarning"
    msg: str = w["message"]
    assert msg.startswith(f"aot_build: {key} runs as plain Python: "), msg
    for fragment in fragments:
        assert fragment in msg, msg
    return msg


# ---------------------------------------------------------------- the wheels


def test_aot_build_wheel_is_pure_python_with_plugin(aot_build_wheel: Path) -> None:
    assert aot_build_wheel.name.endswith("-py3-none-any.whl")
    names = wheel_names(aot_build_wheel)
    for module in ("aot_build/__init__.py", "aot_build/load/shim.py", "aot_build/compile/driver.py"):
        assert module in names
    _, requires = wheel_metadata(aot_build_wheel)
    assert not any(r.startswith("torch") for r in requires), "aot-build must not depend on torch"
    (ep_name,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    with zipfile.ZipFile(aot_build_wheel) as zf:
        eps = zf.read(ep_name).decode()
    assert "[setuptools.finalize_distribution_options]" in eps
    assert "aot_build = aot_build.package.hook:finalize" in eps


def test_example_wheel_is_platform_tagged(example_dists: BuiltDists) -> None:
    wheel = example_dists.wheel
    assert not wheel.name.endswith("-py3-none-any.whl"), wheel.name
    tags = wheel_tags(wheel)
    assert tags and all(not t.endswith("-none-any") for t in tags), tags
    # the Python tag stays the build's: the trace is of the code as that Python runs it
    py = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert all(re.fullmatch(rf"{py}-{py}-manylinux_2_\d+_x86_64", t) for t in tags), tags


def test_example_wheel_requirements_are_its_static_dependencies(example_dists: BuiltDists) -> None:
    """Static [project].dependencies are what the wheel says: checked, never rewritten, and
    setuptools has nothing to warn about."""
    _, requires = wheel_metadata(example_dists.wheel)
    with (EXAMPLE_PROJECT / "pyproject.toml").open("rb") as fh:
        static = tomllib.load(fh)["project"]["dependencies"]
    assert requires == static
    assert "torch==2.13.0" in requires and "aot-build>=0.4.0" in requires
    assert "overwritten" not in example_dists.log
    assert "SetuptoolsWarning" not in example_dists.log
    assert "SetuptoolsDeprecationWarning" not in example_dists.log


def test_example_wheel_ships_manifest_and_libraries(example_dists: BuiltDists, tmp_path: Path) -> None:
    names = wheel_names(example_dists.wheel)
    assert "example_pkg/_aot_build/manifest.json" in names
    libs = sorted(n for n in names if n.endswith(".so"))
    assert libs and all(n.startswith("example_pkg/_aot_build/") for n in libs), libs
    with zipfile.ZipFile(example_dists.wheel) as zf:
        raw = json.loads(zf.read("example_pkg/_aot_build/manifest.json"))
        record = zf.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
    manifest = wheel_manifest(example_dists.wheel, "example_pkg", tmp_path)
    assert raw["format"] == "aot-build-manifest"
    assert manifest.package == "example_pkg"
    assert manifest.torch_version.split("+")[0] == "2.13.0"
    assert set(manifest.entries) == EXAMPLE_KEYS
    # the libraries, the guard evaluator and one record per entry, every one listed and hashed
    folder = "example_pkg/_aot_build/"
    shipped = sorted(n for n in names if n.startswith(folder) and not n.endswith("manifest.json"))
    assert sorted(f"example_pkg/_aot_build/{f}" for f in manifest.files) == shipped
    assert sorted(raw["entries"].values()) == sorted(f for f in manifest.files if f.endswith(".json"))
    assert f"example_pkg/_aot_build/{manifest.evaluator}" in libs
    for entry in manifest.entries.values():
        assert entry.variants and all(v.artifacts for v in entry.variants)
    for lib in libs:
        assert lib in record
    assert not any("/build/" in n or n.endswith(".pt2") for n in names), names


def test_example_sdist_has_sources_only(example_dists: BuiltDists) -> None:
    assert example_dists.sdist is not None
    with tarfile.open(example_dists.sdist) as tf:
        names = tf.getnames()
    assert any(n.endswith("/pyproject.toml") for n in names)
    assert any(n.endswith("/example_pkg/blocks.py") for n in names)
    assert not [n for n in names if "_aot_build" in n], names
    assert not [n for n in names if n.endswith(".so")], names


def test_example_build_log_reports_compiles(example_dists: BuiltDists) -> None:
    log = example_dists.log
    assert "aot-build: exporting 4 entries for cpu-avx2, cpu-baseline" in log
    for key in EXAMPLE_KEYS:  # one progress line per program and target, with the count
        line = rf"aot-build: \[\d+/12\] {re.escape(key)} \[cpu-avx2\] (compiled|from the build cache) in "
        assert re.search(line, log), log


# ---------------------------------------------------------------- the installed package


def test_installed_entries_run_compiled_without_compiler(fresh_venv: Venv, tmp_path: Path) -> None:
    facts = check(fresh_venv, "covered", tmp_path)
    assert facts["path"] == str(fresh_venv.bin)
    assert facts["compilers"] == {c: None for c in ("g++", "gcc", "cc", "c++", "clang")}
    site = str(fresh_venv.site_packages())
    assert facts["example_pkg_file"].startswith(site), facts["example_pkg_file"]
    assert facts["aot_build_file"].startswith(site), facts["aot_build_file"]
    assert facts["torch"].split("+")[0] == "2.13.0"
    assert "manifest.json" in facts["artifacts"]
    assert set(facts["calls"]) == set(EXAMPLE_ENTRIES)
    for name in EXAMPLE_ENTRIES:
        assert_compiled_call(facts["calls"][name], name)
        assert_compiled_call(facts["second"][name], f"{name} (second call)")
    assert facts["calls"]["split_heads_stats"]["type"] == "tuple"
    # no compiler ran: nothing in Inductor's cache, nothing written into the installation
    assert facts["cache_contents"] == []
    assert facts["changed_files"] == {"example_pkg": [], "aot_build": []}
    # the libraries need libgomp.so.1 (not a manylinux library): the one torch ships serves it
    assert facts["libgomp"] and all(p.startswith(facts["torch_lib"]) for p in facts["libgomp"]), facts


def test_results_follow_weight_changes(fresh_venv: Venv, tmp_path: Path) -> None:
    facts = check(fresh_venv, "weights", tmp_path)
    for step in ("load_state_dict", "mul_", "temperature", "attention_load_state_dict"):
        assert_compiled_call(facts[step], step)
        assert facts[step]["changed"] is True, f"{step}: the result did not change with the weights"


def test_uncovered_calls_fall_back_once(fresh_venv: Venv, tmp_path: Path) -> None:
    facts = check(fresh_venv, "fallback", tmp_path)
    assert_one_fallback(
        facts["mlp_first"], "example_pkg.blocks:mlp_block", "x dimension 1 is 16, compiled for 32"
    )
    assert facts["mlp_second"]["warnings"] == []
    assert facts["mlp_second"]["ran_python"] is True
    assert facts["mlp_second"]["mismatch"] is None
    assert_compiled_call(facts["mlp_covered_after"], "covered call after a fallback")
    assert_one_fallback(
        facts["heads_first"], "example_pkg.preprocess:split_heads_stats", "heads is int 2, compiled for int 4"
    )
    assert facts["heads_second"]["warnings"] == [] and facts["heads_second"]["mismatch"] is None
    assert_one_fallback(facts["normalize_small"], "example_pkg.preprocess:normalize")


def test_strict_mode_raises(fresh_venv: Venv, tmp_path: Path) -> None:
    facts = check(fresh_venv, "strict", tmp_path, AOT_BUILD_STRICT="1")
    assert facts["strict_env"] == "1"
    assert_compiled_call(facts["covered"], "covered call in strict mode")
    raised = facts["raised"]
    assert raised is not None, "no FallbackError for an uncovered call with AOT_BUILD_STRICT=1"
    assert (raised["module"], raised["type"]) == ("aot_build.errors", "FallbackError")
    assert "example_pkg.blocks:mlp_block" in raised["message"]
    assert "AOT_BUILD_STRICT=1" in raised["message"]


def test_disable_runs_plain_python(fresh_venv: Venv, tmp_path: Path) -> None:
    facts = check(fresh_venv, "disable", tmp_path, AOT_BUILD_DISABLE="1")
    for name in [*EXAMPLE_ENTRIES, "uncovered"]:
        assert facts[name]["ran_python"] is True, name
        assert facts[name]["warnings"] == [], name
        assert facts[name]["mismatch"] is None, name


def test_damaged_artifact_falls_back(fresh_venv: Venv, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    facts = check(fresh_venv, "damaged", tmp_path, arg=str(work))
    assert facts["imported_from"].startswith(str(work)), "the patched copy was not the one imported"
    assert_one_fallback(
        facts["damaged"], "example_pkg.blocks:mlp_block", f"artifact {facts['victim']} is damaged", "sha256"
    )
    assert facts["damaged_again"]["warnings"] == [] and facts["damaged_again"]["mismatch"] is None
    if not facts["shares_victim"]:
        assert_compiled_call(facts["intact"], "entry with an intact artifact")
    # the installed package itself is untouched
    installed = fresh_venv.site_packages() / "example_pkg" / "_aot_build" / facts["victim"]
    manifest = json.loads((installed.parent / "manifest.json").read_text())
    assert hashlib.sha256(installed.read_bytes()).hexdigest() == manifest["files"][facts["victim"]]["sha256"]


def test_cpu_without_avx2_runs_the_baseline_artifact(fresh_venv: Venv, tmp_path: Path) -> None:
    """The default targets give every x86-64 CPU an artifact: with torch held to its
    baseline (ATEN_CPU_CAPABILITY=default) the call still runs compiled, on cpu-baseline."""
    facts = check(fresh_venv, "host", tmp_path, ATEN_CPU_CAPABILITY="default", AOT_BUILD_STRICT="1")
    assert facts["capability"] == "DEFAULT"
    assert_compiled_call(facts["mlp"], "mlp_block on a baseline CPU")
    assert facts["loaded"] == "cpu-baseline"


def test_cli_in_the_installed_environment(
    fresh_venv: Venv, example_dists: BuiltDists, tmp_path: Path
) -> None:
    env = isolated_env(fresh_venv)
    schema = run([fresh_venv.bin / "aot-build", "schema"], cwd=tmp_path, env=env)
    props = json.loads(schema.stdout)["properties"]
    assert set(props) == {
        "targets",
        "optional-targets",
        "modules",
        "exclude",
        "strip",
        "cache",
        "cache-dir",
        "cache-max-size",
        "jobs",
        "progress",
        "backend",
        "inductor-options",
        "manylinux",
    }
    installed = run(
        [fresh_venv.python, "-m", "aot_build", "inspect", "example_pkg", "--json"], cwd=tmp_path, env=env
    )
    info = json.loads(installed.stdout)
    (pkg,) = info["packages"]
    assert pkg["manifest"].startswith(str(fresh_venv.site_packages()))
    assert {e["entry"] for e in pkg["entries"]} == EXAMPLE_KEYS
    for e in pkg["entries"]:  # the default targets: cpu-avx2 and cpu-baseline
        assert [a["target"] for a in e["artifacts"]] == ["cpu-avx2", "cpu-baseline"]
        assert e["artifacts"][0]["needs"]["march"] == "x86-64-v3"
        assert {"avx2", "bmi2", "abm", "fma"} <= set(e["artifacts"][0]["needs"]["features"])
        expected = "cpu-avx2" if "cpu-avx2" in info["host_cpu_targets"] else "cpu-baseline"
        assert e["this_host_loads"] == expected
    wheel = run([fresh_venv.python, "-m", "aot_build", "inspect", example_dists.wheel], cwd=tmp_path, env=env)
    assert "example_pkg.blocks:mlp_block" in wheel.stdout
    assert "<- this host loads" in wheel.stdout


# ---------------------------------------------------------------- builds that must fail


def _decorated_lines(source: Path, function: str) -> set[str]:
    """Line numbers that may name ``function``: its decorator's and its def's."""
    lines = source.read_text().splitlines()
    def_line = next(i for i, text in enumerate(lines, 1) if text.startswith(f"def {function}("))
    return {str(def_line - 1), str(def_line)}


@pytest.mark.parametrize(
    ("project", "expected"),
    [
        (
            "graph_break",
            [
                "graph_break_pkg.ops:branchy (graph_break_pkg/ops.py:{line})",
                "stopped with Unsupported: Data-dependent branching",
                "no Python control flow on tensor values",
                "no wheel was written",
            ],
        ),
        (
            "import_error",
            [
                "cannot import module 'import_error_pkg.broken'",
                "No module named 'aot_build_missing_dependency_xyz'",
                "no wheel was written",
            ],
        ),
        ("unknown_key", ["unknown key 'target' in [tool.aot-build]. Did you mean 'targets'?"]),
    ],
)
def test_failing_build_explains_and_writes_no_wheel(
    project: str, expected: list[str], tmp_path: Path, inductor_cache: Path
) -> None:
    proc, src, out = build_sample(project, tmp_path, inductor_cache)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    for fragment in expected:
        if "{line}" in fragment:
            candidates = _decorated_lines(src / "graph_break_pkg" / "ops.py", "branchy")
            assert any(fragment.format(line=n) in output for n in candidates), (fragment, candidates, output)
        else:
            assert fragment in output, output
    left = [*out.rglob("*.whl"), *src.rglob("*.whl")] if out.exists() else [*src.rglob("*.whl")]
    assert left == [], f"a failed build left wheels behind: {left}"


# ---------------------------------------------------------------- more projects in the same environment


def test_src_layout_wheel(src_layout_installed: Path, tmp_path: Path) -> None:
    names = wheel_names(src_layout_installed)
    assert "srcpkg/ops/fused.py" in names
    assert "srcpkg/_aot_build/manifest.json" in names
    manifest = wheel_manifest(src_layout_installed, "srcpkg", tmp_path)
    assert set(manifest.entries) == {"srcpkg.ops.fused:fused", "srcpkg.ops.fused:fused_direct"}
    for key, entry in manifest.entries.items():
        (variant,) = entry.variants
        bound = [[p.label() for p in paths] for paths in variant.state.weight_paths()]
        assert bound in ([["srcpkg.helpers.SCALE"]], [["srcpkg.ops.fused.helpers.SCALE"]]), (key, bound)
        assert variant.embedded_constants == (), key
        assert entry.source.startswith("srcpkg/ops/fused.py:")
        # the -C build option beat AOT_BUILD_TARGETS and pyproject.toml
        assert [a.target for a in variant.artifacts] == ["cpu-baseline"], key


def test_src_layout_follows_helper_global(
    src_layout_installed: Path, fresh_venv: Venv, tmp_path: Path
) -> None:
    facts = check(fresh_venv, "srcpkg", tmp_path)
    assert facts["file"].startswith(str(fresh_venv.site_packages()))
    for name in ("fused", "fused_direct"):
        assert_compiled_call(facts[f"{name}_before"], name)
        assert_compiled_call(facts[f"{name}_after"], f"{name} after replacing helpers.SCALE")
        assert facts[f"{name}_after"]["changed"] is True
    assert_compiled_call(facts["fused_in_place"], "fused after an in-place change of helpers.SCALE")


def test_editable_install_runs_plain_python(fresh_venv: Venv, aot_build_wheel: Path, tmp_path: Path) -> None:
    src = copy_project(SAMPLE_PROJECTS / "editable", tmp_path / "editable")
    proc = fresh_venv.pip_install("-v", "-e", src, cwd=tmp_path, env=build_env(aot_build_wheel.parent))
    assert "editable install: entries run as plain Python" in proc.stdout + proc.stderr
    assert not list(src.rglob("_aot_build")), "an editable install must not compile"
    facts = check(fresh_venv, "editable", tmp_path)
    assert facts["file"] == str(src / "editable_pkg" / "__init__.py")
    for case in ("covered_shape", "other_shape"):
        assert facts[case]["ran_python"] is True, case
        assert facts[case]["warnings"] == [], case
        assert facts[case]["mismatch"] is None, case
