import aot_build_missing_dependency_abc  # noqa: F401 - not installed anywhere
