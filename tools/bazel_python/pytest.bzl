"""pytest_test: a py_test that runs pytest test files with the project's virtualenv."""

def pytest_test(name, srcs = None, deps = [], data = [], args = [], **kwargs):
    """Declares a py_test running pytest on `srcs` (default: [name + ".py"]).

    Args:
      name: target name, by convention the test file's name without ".py".
      srcs: the pytest files of this target (and helper modules they import).
      deps: py_library targets the tests import, e.g. "//tff_adaptive/optimizers:adam".
      data: extra runtime files (conftest.py, fixtures); //:pytest.ini is always added.
      args: extra pytest arguments, after the test files.
      **kwargs: other py_test attributes (size, timeout, tags, shard_count, ...).
    """
    if srcs == None:
        srcs = [name + ".py"]
    main = "//tools/bazel_python:pytest_main.py"
    package = native.package_name()
    test_files = [
        (package + "/" + s if package else s)
        for s in srcs
        if s.split("/")[-1].startswith("test_")
    ]
    native.py_test(
        name = name,
        srcs = srcs + [main],
        main = main,
        # Bazel runs tests in the runfiles copy of the workspace, so workspace-relative paths.
        args = test_files + args,
        data = data + ["//:pytest.ini"],
        deps = deps,
        python_version = "PY3",
        **kwargs
    )
