"""scheduler/ is pure standard-library Python: no third-party imports, and no clock,
randomness, OS or file access in the decision code. Only the command-line module reads and
writes files and reads the wall clock; only the generator draws (seeded) random numbers."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "scheduler"
FORBIDDEN_MODULES = {
    "time",
    "random",
    "os",
    "socket",
    "subprocess",
    "pathlib",
    "shutil",
    "io",
    "tempfile",
    "datetime",
    "secrets",
    "threading",
    "asyncio",
    "urllib",
    "http",
}
# The only modules allowed something of FORBIDDEN_MODULES, and exactly what.
ALLOWED = {
    "__main__.py": {"time", "pathlib"},  # the CLI: reads/writes the files, times decide_ms
    "generate.py": {"random"},  # seeded: the same seed gives the same workload
    "workload.py": {"io"},  # io.StringIO over text the CLI reads or writes
}
FILE_CALLS = {"open"}
FILE_METHODS = {"read_text", "write_text", "read_bytes", "write_bytes", "open"}


def modules() -> list[Path]:
    return sorted(PACKAGE.glob("*.py"))


def imported(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_package_has_modules_to_check() -> None:
    assert {"engine.py", "types.py", "simulate.py", "__main__.py"} <= {p.name for p in modules()}


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.name)
def test_imports_only_the_standard_library(path: Path) -> None:
    outside = {
        m
        for m in imported(ast.parse(path.read_text()))
        if m not in sys.stdlib_module_names and m != "scheduler"
    }
    assert not outside, f"{path.name} imports {sorted(outside)}"


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.name)
def test_no_clock_randomness_os_or_files_outside_the_named_io_modules(path: Path) -> None:
    tree = ast.parse(path.read_text())
    allowed = ALLOWED.get(path.name, set())
    bad = (imported(tree) & FORBIDDEN_MODULES) - allowed
    assert not bad, f"{path.name} uses {sorted(bad)}"
    if path.name == "__main__.py":
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            assert not (isinstance(f, ast.Name) and f.id in FILE_CALLS), (
                f"{path.name}:{node.lineno} opens a file"
            )
            assert not (isinstance(f, ast.Attribute) and f.attr in FILE_METHODS), (
                f"{path.name}:{node.lineno} touches a file"
            )
            assert not (isinstance(f, ast.Attribute) and f.attr == "now"), (
                f"{path.name}:{node.lineno} reads the clock"
            )


def test_the_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    tree = ast.parse("import time\nfrom os import path\nimport django\n")
    assert imported(tree) == {"time", "os", "django"}
    assert "django" not in sys.stdlib_module_names


def test_package_init_imports_nothing_outside_the_standard_library() -> None:
    import subprocess

    # -I -S: no site-packages at all, as on a machine with nothing installed.
    code = (
        "import sys, scheduler.simulate; ok = sys.stdlib_module_names | {'scheduler', '__main__'};"
        " print([m for m in sys.modules if m.split('.')[0] not in ok])"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            f"import sys; sys.path.insert(0, {str(PACKAGE.parent)!r}); {code}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"
