"""The layers stay layered: the model layer (`rlvr.models`) and the rollout side (`rlvr.rollout`)
never import the training layer (`rlvr.train`) or evaluation (`rlvr.eval`), at the top of a module or
inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOWER = ("rlvr/models", "rlvr/rollout")


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import in ``tree``, wherever it is (``from . import x`` is relative: skipped)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return out


def test_imported_modules_sees_imports_inside_functions():
    tree = ast.parse("import os\ndef f():\n    from rlvr.train.harness import Harness\n    import rlvr.train\n")
    assert [m for _, m in imported_modules(tree)] == ["os", "rlvr.train.harness", "rlvr.train.harness.Harness", "rlvr.train"]


@pytest.mark.parametrize("folder", LOWER)
def test_lower_layers_do_not_import_training(folder):
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files
    found = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for path in files for line, module in imported_modules(ast.parse(path.read_text(), str(path)))
             if module in ("rlvr.train", "rlvr.eval") or module.startswith(("rlvr.train.", "rlvr.eval."))]
    assert not found, "\n".join(found)
