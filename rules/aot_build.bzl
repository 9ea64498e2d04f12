"""Bazel rules that precompile a Python package's @aot_entry functions with aot-build.

    load("@aot_build_rules//:aot_build.bzl", "aot_package")

    aot_package(
        name = "mypkg",
        srcs = glob(["mypkg/**/*.py"]),
        pyproject = "pyproject.toml",
        entries = ["mypkg.ops:fused_block"],      # python -m aot_build entries --project .
        targets = ["cpu-avx2", "cpu-baseline"],
    )
    # -> :mypkg_artifacts (the assembled folder), :mypkg_wheel (a folder holding the wheel)

Each unit of work is its own action, so Bazel runs them in parallel, caches each (locally,
in a --disk_cache, in a --remote_cache) and can send each to a remote executor:

    AotExport    one per entry               python -m aot_build export
    AotCompile   one per entry and target    python -m aot_build compile
    AotEntries   one                         python -m aot_build entries --expect ... (the check)
    AotAssemble  one                         python -m aot_build assemble
    AotWheel     one                         python -m build --wheel --no-isolation
                                             with AOT_BUILD_PREBUILT=<the assembled folder>

Only plain Starlark (ctx.actions.run, declare_directory): no rules_python, rules_cc or
anything else to download. The Python interpreter is not a Bazel target: it is the toolchain,
found by the repository rule aot_toolchain() (in the WORKSPACE) at the absolute path
--repo_env=AOT_BUILD_PYTHON=/abs/path/bin/python gives (a Python with torch, aot-build,
setuptools and build; g++ and binutils on PATH). See README.md.
"""

AotArtifactsInfo = provider(
    doc = "The assembled artifact folder of an aot_artifacts target.",
    fields = {
        "folder": "Directory (tree artifact): <package path>/_aot_build/{manifest.json,*.so} " +
                  "for each top-level package; what AOT_BUILD_PREBUILT expects.",
        "targets": "The target names it holds libraries for.",
        "entries": "The entry keys it holds.",
    },
)

AotToolchainInfo = provider(
    doc = "The Python toolchain every action runs (see aot_toolchain).",
    fields = {
        "python": "File: the launcher of the interpreter (its content names no path).",
        "toolchain_id": "File: the toolchain's identity (Python, torch, aot-build, g++, strip).",
        "path": "The actions' PATH.",
    },
)

_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

# The interpreter's launcher. Its content is the same on every machine, so an action's key
# holds the toolchain's identity (toolchain_id, an input) and not where the interpreter is
# installed: checkouts and machines whose Python lives elsewhere share cache entries. The
# path is read from the file `interpreter` next to the launcher's real location (a sandbox
# links the launcher there; `interpreter` is deliberately no input). Where the launcher is a
# plain copy (a remote executor), it runs python3 from the actions' PATH: the worker's image
# provides the toolchain there.
_LAUNCHER = """#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
if [ -r "$here/interpreter" ]; then
    IFS= read -r python < "$here/interpreter"
    exec "$python" "$@"
fi
exec python3 "$@"
"""

def _aot_toolchain_impl(rctx):
    python = rctx.os.environ.get("AOT_BUILD_PYTHON", "") or rctx.attr.python
    if not python:
        fail(
            "aot_build: no Python interpreter given. Build with " +
            "--repo_env=AOT_BUILD_PYTHON=/absolute/path/to/bin/python (a Python with torch, " +
            "aot-build, setuptools and build installed), e.g. in the workspace's .bazelrc:\n" +
            "    build --repo_env=AOT_BUILD_PYTHON=/opt/venv/bin/python\n" +
            "or set python = \"...\" in aot_toolchain() in the WORKSPACE",
        )
    if not python.startswith("/"):
        fail("aot_build: AOT_BUILD_PYTHON=%s must be an absolute path" % python)
    path = rctx.os.environ.get("AOT_BUILD_PATH", "") or rctx.attr.path
    tool = rctx.path(Label("//:aot_action.py"))
    res = rctx.execute(
        [python, str(tool), "toolchain-id"],
        environment = {"PATH": path, "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"},
        timeout = 300,
    )
    if res.return_code != 0:
        fail("aot_build: %s %s toolchain-id failed (exit status %d): a Python with torch and " %
             (python, tool, res.return_code) + "aot-build installed is needed:\n" + res.stdout + res.stderr)
    rctx.file("toolchain_id", res.stdout.strip() + "\n", executable = False)
    rctx.file("interpreter", python + "\n", executable = False)
    rctx.file("python", _LAUNCHER, executable = True)
    rctx.file("BUILD", """load("{bzl}", "aot_python_toolchain")

# Made by aot_toolchain() for the interpreter {python}: {id}
aot_python_toolchain(
    name = "toolchain",
    python = "python",
    toolchain_id = "toolchain_id",
    path = "{path}",
    visibility = ["//visibility:public"],
)
""".format(bzl = str(Label("//:aot_build.bzl")), python = python, id = res.stdout.strip(), path = path))

aot_toolchain = repository_rule(
    implementation = _aot_toolchain_impl,
    doc = "The Python toolchain of the aot_build rules, in the WORKSPACE: " +
          "aot_toolchain(name = \"aot_toolchain\"). The interpreter comes from " +
          "--repo_env=AOT_BUILD_PYTHON=/abs/bin/python (else the python attribute); its " +
          "identity is computed here once and checked by every action.",
    attrs = {
        "python": attr.string(doc = "Absolute path of the interpreter (AOT_BUILD_PYTHON overrides it)."),
        "path": attr.string(
            default = _DEFAULT_PATH,
            doc = "The actions' PATH, where g++ and strip are found (AOT_BUILD_PATH overrides it).",
        ),
    },
    environ = ["AOT_BUILD_PYTHON", "AOT_BUILD_PATH"],
    local = True,
)

def _aot_python_toolchain_impl(ctx):
    return [AotToolchainInfo(
        python = ctx.file.python,
        toolchain_id = ctx.file.toolchain_id,
        path = ctx.attr.path,
    )]

aot_python_toolchain = rule(
    implementation = _aot_python_toolchain_impl,
    doc = "Internal: the target aot_toolchain() writes into its repository.",
    attrs = {
        "python": attr.label(allow_single_file = True, mandatory = True),
        "toolchain_id": attr.label(allow_single_file = True, mandatory = True),
        "path": attr.string(mandatory = True),
    },
)

# 1980-01-01T00:00:00Z, the earliest time a zip entry can hold.
DEFAULT_SOURCE_DATE_EPOCH = 315532800

def _toolchain(ctx):
    """The interpreter's launcher, the toolchain id file (both inputs of every action) and the
    actions' whole environment: nothing is inherited from the client's shell.

    HOME, TMPDIR and the caches are set by aot_action.py to folders in the action's scratch
    space (they must exist and be absolute)."""
    info = ctx.attr._toolchain[AotToolchainInfo]
    env = {
        "PATH": info.path,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONSAFEPATH": "1",
    }
    return struct(python = info.python, id = info.toolchain_id, env = env)

def _logical(f):
    """A file's path in its repository, whether a source or a generated file."""
    if f.root.path and f.path.startswith(f.root.path + "/"):
        return f.path[len(f.root.path) + 1:]
    return f.path

def _project_files(ctx):
    """[(file, path relative to the project folder)] for srcs (+ data), and the pyproject file."""
    pyproject = ctx.file.pyproject
    if pyproject.basename != "pyproject.toml":
        fail("aot_build: pyproject must be a file named pyproject.toml, got %s" % pyproject.short_path)
    top = _logical(pyproject).rpartition("/")[0]
    prefix = top + "/" if top else ""
    pairs = []
    files = ctx.files.srcs + (ctx.files.data if hasattr(ctx.files, "data") else [])
    for f in files:
        logical = _logical(f)
        if not logical.startswith(prefix):
            fail(("aot_build: %s is not under the project folder %s (the folder of pyproject.toml); " +
                  "srcs must be the project's files") % (f.short_path, top or "(the repository root)"))
        pairs.append((f, logical[len(prefix):]))
    return pairs, pyproject

def _project_args(args, pairs, pyproject, path):
    args.add("--pyproject", pyproject)
    args.add("--path", path)
    for f, rel in pairs:
        args.add("--src")
        args.add(f)
        args.add(rel)

def _new_args(ctx, tool, command, out, tc):
    """The arguments of one action: the wrapper and its command, then the rest (in a params
    file when the command line gets too long, e.g. for a package of many files). Scratch
    space: a sibling folder of the declared output, removed when the action ends."""
    head = ctx.actions.args()
    head.add(tool)
    head.add(command)
    args = ctx.actions.args()
    args.use_param_file("@%s", use_always = False)
    args.set_param_file_format("multiline")
    args.add("--scratch", out.path + ".scratch")
    args.add("--toolchain-id", tc.id)
    return head, args

def _build_file(ctx):
    """The BUILD file of the target, for messages."""
    if hasattr(ctx, "build_file_path"):
        return ctx.build_file_path
    return (ctx.label.package + "/" if ctx.label.package else "") + "BUILD"

def _check_path(path):
    if path.startswith("/") or ".." in path.split("/"):
        fail("aot_build: path = %r must be a folder inside the project (relative, no ..)" % path)

def _aot_artifacts_impl(ctx):
    tc = _toolchain(ctx)
    tool = ctx.file._tool
    _check_path(ctx.attr.path)
    if not ctx.attr.entries:
        fail("aot_build: entries is empty; list them with: python -m aot_build entries --project DIR")
    if not ctx.attr.targets:
        fail("aot_build: targets is empty (e.g. [\"cpu-avx2\", \"cpu-baseline\"])")
    for key in ctx.attr.entries:
        module, sep, qualname = key.partition(":")
        if not sep or not module or not qualname or "/" in key:
            fail("aot_build: entry %r is not MODULE:QUALNAME" % key)
    if len(ctx.attr.entries) != len({k: None for k in ctx.attr.entries}):
        fail("aot_build: entries lists a key twice")
    if len(ctx.attr.targets) != len({t: None for t in ctx.attr.targets}):
        fail("aot_build: targets lists a target twice")
    for t in ctx.attr.targets:
        if t == "cpu":
            fail("aot_build: targets: name the CPU targets, e.g. [\"cpu-avx2\", \"cpu-baseline\"] " +
                 "(what \"cpu\" stands for on x86_64; cpu-baseline elsewhere): an action's " +
                 "outputs may not depend on the machine that runs it")
        if t == "cpu-host":
            fail("aot_build: targets: \"cpu-host\" is the CPU of whichever machine runs the " +
                 "action (a remote worker, a cache entry's author); name the level, e.g. \"cpu-avx2\"")
        if not t or "/" in t or "," in t:
            fail("aot_build: bad target name %r" % t)

    pairs, pyproject = _project_files(ctx)
    project_inputs = [f for f, _ in pairs] + [pyproject]
    targets = ",".join(ctx.attr.targets)
    base = "_aot/%s/" % ctx.label.name
    exported_dirs = []
    compiled_dirs = []
    for key in ctx.attr.entries:
        module, _, qualname = key.partition(":")
        exported = ctx.actions.declare_directory(base + "export/%s/%s" % (module, qualname))
        unused = ctx.actions.declare_file(base + "export/%s/%s.unused" % (module, qualname))
        head, args = _new_args(ctx, tool, "export", exported, tc)
        _project_args(args, pairs, pyproject, ctx.attr.path)
        args.add("--entry", key)
        args.add("--targets", targets)
        args.add("--out", exported.path)
        args.add("--unused", unused.path)
        ctx.actions.run(
            executable = tc.python,
            arguments = [head, args],
            inputs = [tool, tc.id] + project_inputs,
            outputs = [exported, unused],
            # The modules the export did not import: Bazel reruns it only when a module of
            # its import closure (or another file) changes.
            unused_inputs_list = unused,
            env = tc.env,
            mnemonic = "AotExport",
            progress_message = "aot-build: exporting %s (%s)" % (key, ctx.label),
        )
        exported_dirs.append(exported)
        for target in ctx.attr.targets:
            compiled = ctx.actions.declare_directory(base + "compile/%s/%s/%s" % (target, module, qualname))
            unused = ctx.actions.declare_file(base + "compile/%s/%s/%s.unused" % (target, module, qualname))
            head, args = _new_args(ctx, tool, "compile", compiled, tc)
            _project_args(args, pairs, pyproject, ctx.attr.path)
            args.add("--exported", exported.path)
            args.add("--target", target)
            args.add("--out", compiled.path)
            args.add("--unused", unused.path)
            ctx.actions.run(
                executable = tc.python,
                arguments = [head, args],
                inputs = [tool, tc.id, exported] + project_inputs,
                outputs = [compiled, unused],
                # A compile imports the package only for operators it registers: an edit
                # elsewhere in the package recompiles nothing whose program did not change.
                unused_inputs_list = unused,
                env = tc.env,
                mnemonic = "AotCompile",
                progress_message = "aot-build: compiling %s for %s (%s)" % (key, target, ctx.label),
            )
            compiled_dirs.append(compiled)

    # Every @aot_entry of the project must be listed, and only those: one action imports the
    # package, lists its entries and fails on any difference (naming each entry and the fix).
    # The assemble step takes its output, so no artifacts (and no wheel) come without it.
    checked = ctx.actions.declare_file(base + "entries.txt")
    head, args = _new_args(ctx, tool, "entries", checked, tc)
    _project_args(args, pairs, pyproject, ctx.attr.path)
    for key in ctx.attr.entries:
        args.add("--expect", key)
    args.add("--listed-in", "the entries of %s (%s)" % (ctx.label, _build_file(ctx)))
    args.add("--out", checked.path)
    ctx.actions.run(
        executable = tc.python,
        arguments = [head, args],
        inputs = [tool, tc.id] + project_inputs,
        outputs = [checked],
        env = tc.env,
        mnemonic = "AotEntries",
        progress_message = "aot-build: checking the entries list against the package (%s)" % ctx.label,
    )

    folder = ctx.actions.declare_directory(ctx.label.name)
    head, args = _new_args(ctx, tool, "assemble", folder, tc)
    args.add("--checked", checked.path)
    for d in exported_dirs:
        args.add("--exported", d.path)
    for d in compiled_dirs:
        args.add("--compiled", d.path)
    args.add("--targets", targets)
    args.add("--out", folder.path)
    ctx.actions.run(
        executable = tc.python,
        arguments = [head, args],
        inputs = [tool, tc.id, checked] + exported_dirs + compiled_dirs,
        outputs = [folder],
        env = tc.env,
        mnemonic = "AotAssemble",
        progress_message = "aot-build: assembling %d entries x %d targets (%s)" % (
            len(ctx.attr.entries),
            len(ctx.attr.targets),
            ctx.label,
        ),
    )
    return [
        DefaultInfo(files = depset([folder])),
        AotArtifactsInfo(folder = folder, targets = ctx.attr.targets, entries = ctx.attr.entries),
        OutputGroupInfo(
            exported = depset(exported_dirs),
            compiled = depset(compiled_dirs),
            entries = depset([checked]),
        ),
    ]

_PROJECT_ATTRS = {
    "srcs": attr.label_list(
        allow_files = True,
        mandatory = True,
        doc = "The project's files the build reads: the package's sources (and any file " +
              "setup/pyproject refers to). All must be under the folder of pyproject.",
    ),
    "pyproject": attr.label(
        allow_single_file = True,
        mandatory = True,
        doc = "The project's pyproject.toml (its [tool.aot-build] inductor-options and strip " +
              "are read; targets come from the rule's targets attribute).",
    ),
    "_tool": attr.label(
        default = Label("//:aot_action.py"),
        allow_single_file = True,
    ),
    "_toolchain": attr.label(
        default = Label("@aot_toolchain//:toolchain"),
        providers = [AotToolchainInfo],
    ),
}

aot_artifacts = rule(
    implementation = _aot_artifacts_impl,
    doc = "Exports and compiles a package's entries for targets; the assembled artifact folder.",
    attrs = dict(_PROJECT_ATTRS, **{
        "path": attr.string(
            default = ".",
            doc = "Folder, relative to pyproject's, the package imports from (\"src\" for a src layout).",
        ),
        "entries": attr.string_list(
            mandatory = True,
            doc = "Entry keys MODULE:QUALNAME (python -m aot_build entries --project DIR).",
        ),
        "targets": attr.string_list(
            mandatory = True,
            doc = "Target names, e.g. [\"cpu-avx2\", \"cpu-baseline\"] (what [\"cpu\"] means on x86_64).",
        ),
    }),
)

def _aot_wheel_impl(ctx):
    tc = _toolchain(ctx)
    env = dict(tc.env)
    env["SOURCE_DATE_EPOCH"] = str(ctx.attr.source_date_epoch)
    tool = ctx.file._tool
    pairs, pyproject = _project_files(ctx)
    artifacts = ctx.attr.artifacts[AotArtifactsInfo].folder
    out = ctx.actions.declare_directory(ctx.label.name)
    head, args = _new_args(ctx, tool, "wheel", out, tc)
    _project_args(args, pairs, pyproject, ".")
    args.add("--artifacts", artifacts.path)
    args.add("--out", out.path)
    ctx.actions.run(
        executable = tc.python,
        arguments = [head, args],
        inputs = [tool, tc.id, artifacts, pyproject] + [f for f, _ in pairs],
        outputs = [out],
        env = env,
        mnemonic = "AotWheel",
        progress_message = "aot-build: building the wheel (%s)" % ctx.label,
    )
    return [DefaultInfo(files = depset([out]))]

aot_wheel = rule(
    implementation = _aot_wheel_impl,
    doc = "The project's wheel, shipping the artifacts of an aot_artifacts target. The output " +
          "is a folder holding the one wheel under its real file name (its platform tag is " +
          "computed from the libraries, so the name is not known before the build).",
    attrs = dict(_PROJECT_ATTRS, **{
        "artifacts": attr.label(
            mandatory = True,
            providers = [AotArtifactsInfo],
            doc = "An aot_artifacts target of the same project.",
        ),
        "data": attr.label_list(
            allow_files = True,
            doc = "More project files the wheel build reads (README, LICENSE, package data).",
        ),
        "source_date_epoch": attr.int(
            default = DEFAULT_SOURCE_DATE_EPOCH,
            doc = "SOURCE_DATE_EPOCH of the wheel build (its zip timestamps).",
        ),
    }),
)

def aot_package(
        name,
        srcs,
        pyproject,
        entries,
        targets,
        path = ".",
        data = [],
        source_date_epoch = DEFAULT_SOURCE_DATE_EPOCH,
        **kwargs):
    """:<name>_artifacts (aot_artifacts) and :<name>_wheel (aot_wheel) of one project.

    kwargs (visibility, tags, ...) go to both."""
    aot_artifacts(
        name = name + "_artifacts",
        srcs = srcs,
        pyproject = pyproject,
        entries = entries,
        targets = targets,
        path = path,
        **kwargs
    )
    aot_wheel(
        name = name + "_wheel",
        srcs = srcs,
        pyproject = pyproject,
        artifacts = ":" + name + "_artifacts",
        data = data,
        source_date_epoch = source_date_epoch,
        **kwargs
    )
