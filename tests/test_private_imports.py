"""No private name crosses a module boundary: walking every module of the project (and of its tests), an import
``from x import _name`` of one of our modules fails this test, and so does an import of a private module
(``x._module``) from outside the package that holds it. What a module keeps private is its own; what another
module needs is public, in the module that owns it."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OURS = ("harness", "gateway", "certify", "catalog", "reports", "fixtures", "tests")
WALKED = (*OURS, "scripts")


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def crossings(path: Path, importer: str | None = None) -> list[str]:
    """Each private name or private module that ``path`` (module ``importer``, by default the one its place in the
    checkout names) imports from another of our modules or packages."""
    importer = importer or _module(path)
    here = _package(importer, path.name == "__init__.py")
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module or node.module.split(".")[0] not in OURS:
            continue
        source = node.module
        private_module = next((i for i, part in enumerate(source.split(".")) if _private(part)), None)
        if private_module is not None:
            holder = ".".join(source.split(".")[:private_module])
            if here != holder and not here.startswith(holder + "."):
                found.append(f"{shown}:{node.lineno}: imports the private module {source}")
        if source != importer:
            names = [alias.name for alias in node.names if _private(alias.name)]
            found += [f"{shown}:{node.lineno}: from {source} import {name}" for name in names]
    return found


def test_no_private_name_is_imported_across_modules() -> None:
    found = [line for package in WALKED for path in sorted((REPO / package).rglob("*.py")) for line in crossings(path)]
    assert not found, "make these public where they are owned (or move the code that needs them there):\n" + "\n".join(found)


def test_the_walk_sees_both_kinds_of_crossing(tmp_path: Path) -> None:
    """The check itself: a module of ours importing a private name, and a private module from elsewhere."""
    probe = tmp_path / "probe.py"
    lines = [
        "from harness.cli.run import _execute",
        "from catalog.signing._keys import read_bounded",
        "from harness import errors",
    ]
    probe.write_text("\n".join(lines) + "\n")
    found = crossings(probe, "harness.app.probe")
    assert len(found) == 2 and "import _execute" in found[0] and "catalog.signing._keys" in found[1], found
