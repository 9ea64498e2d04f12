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
    AotAssemble  one                         python -m aot_build assemble
    AotWheel     one                         python -m build --wheel --no-isolation
                                             with AOT_BUILD_PREBUILT=<the assembled folder>

Only plain Starlark (ctx.actions.run, declare_directory): no rules_python, rules_cc or
anything else to download. The Python interpreter is not a Bazel target: it is the toolchain,
given as an absolute path with --define=AOT_BUILD_PYTHON=/abs/path/bin/python (a Python with
torch, aot-build, setuptools and build; g++ and binutils on PATH). See README.md.
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

_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

# 1980-01-01T00:00:00Z, the earliest time a zip entry can hold.
DEFAULT_SOURCE_DATE_EPOCH = 315532800

def _python(ctx):
    python = ctx.var.get("AOT_BUILD_PYTHON", "")
    if not python:
        fail(
            "aot_build: no Python interpreter given. Build with " +
            "--define=AOT_BUILD_PYTHON=/absolute/path/to/bin/python (a Python with torch, " +
            "aot-build, setuptools and build installed), e.g. in the workspace's .bazelrc:\n" +
            "    build --define=AOT_BUILD_PYTHON=/opt/venv/bin/python",
        )
    if not python.startswith("/"):
        fail("aot_build: --define=AOT_BUILD_PYTHON=%s must be an absolute path" % python)
    return python

def _env(ctx, python):
    """The whole environment of an action: nothing is inherited from the client's shell.

    HOME, TMPDIR and the caches are set by aot_action.py to folders in the action's scratch
    space (they must exist and be absolute)."""
    path = ctx.var.get("AOT_BUILD_PATH", "")
    if not path:
        path = python.rpartition("/")[0] + ":" + _DEFAULT_PATH
    env = {
        "PATH": path,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONSAFEPATH": "1",
    }
    toolchain = ctx.var.get("AOT_BUILD_TOOLCHAIN", "")
    if toolchain:
        # Part of every action's key: a different toolchain never reuses cached outputs.
        env["AOT_BUILD_TOOLCHAIN_ID"] = toolchain
    return env

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

def _new_args(ctx, tool, command, out):
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
    return head, args

def _check_path(path):
    if path.startswith("/") or ".." in path.split("/"):
        fail("aot_build: path = %r must be a folder inside the project (relative, no ..)" % path)

def _aot_artifacts_impl(ctx):
    python = _python(ctx)
    env = _env(ctx, python)
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
        head, args = _new_args(ctx, tool, "export", exported)
        _project_args(args, pairs, pyproject, ctx.attr.path)
        args.add("--entry", key)
        args.add("--targets", targets)
        args.add("--out", exported.path)
        ctx.actions.run(
            executable = python,
            arguments = [head, args],
            inputs = [tool] + project_inputs,
            outputs = [exported],
            env = env,
            mnemonic = "AotExport",
            progress_message = "aot-build: exporting %s (%s)" % (key, ctx.label),
        )
        exported_dirs.append(exported)
        for target in ctx.attr.targets:
            compiled = ctx.actions.declare_directory(base + "compile/%s/%s/%s" % (target, module, qualname))
            head, args = _new_args(ctx, tool, "compile", compiled)
            _project_args(args, pairs, pyproject, ctx.attr.path)
            args.add("--exported", exported.path)
            args.add("--target", target)
            args.add("--out", compiled.path)
            ctx.actions.run(
                executable = python,
                arguments = [head, args],
                inputs = [tool, exported] + project_inputs,
                outputs = [compiled],
                env = env,
                mnemonic = "AotCompile",
                progress_message = "aot-build: compiling %s for %s (%s)" % (key, target, ctx.label),
            )
            compiled_dirs.append(compiled)

    folder = ctx.actions.declare_directory(ctx.label.name)
    head, args = _new_args(ctx, tool, "assemble", folder)
    for d in exported_dirs:
        args.add("--exported", d.path)
    for d in compiled_dirs:
        args.add("--compiled", d.path)
    args.add("--targets", targets)
    args.add("--out", folder.path)
    ctx.actions.run(
        executable = python,
        arguments = [head, args],
        inputs = [tool] + exported_dirs + compiled_dirs,
        outputs = [folder],
        env = env,
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
    python = _python(ctx)
    env = _env(ctx, python)
    env["SOURCE_DATE_EPOCH"] = str(ctx.attr.source_date_epoch)
    tool = ctx.file._tool
    pairs, pyproject = _project_files(ctx)
    artifacts = ctx.attr.artifacts[AotArtifactsInfo].folder
    out = ctx.actions.declare_directory(ctx.label.name)
    head, args = _new_args(ctx, tool, "wheel", out)
    _project_args(args, pairs, pyproject, ".")
    args.add("--artifacts", artifacts.path)
    args.add("--out", out.path)
    ctx.actions.run(
        executable = python,
        arguments = [head, args],
        inputs = [tool, artifacts, pyproject] + [f for f, _ in pairs],
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
