"""The package's folders are its layers (docs/architecture.md 2): the core imports no
Lightning, Hydra or OmegaConf and nothing of the layers above it, no module imports another
in a cycle, and no private name crosses a file."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.config import ROOT

PACKAGE = ROOT / "swwae"
FRAMEWORKS = ("lightning", "pytorch_lightning", "hydra", "omegaconf")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
COMMANDS = sorted(name for name in MODULES if name.startswith(("swwae.commands", "swwae.__main__")))  # the top layer
CORE = sorted(
    name for name in MODULES if not name.startswith(("swwae.training", "swwae.bench")) and name not in COMMANDS
)


def imports(name: str) -> list[tuple[str, list[str]]]:
    """(imported module, names taken from it) of every import in ``name``, at any depth
    (imports inside functions count: a cycle dodged by a lazy import is still a cycle)."""
    tree = ast.parse(MODULES[name].read_text())
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            names = [alias.name for alias in node.names]
            submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES]
            found += [(base, [n for n in names if f"{base}.{n}" not in MODULES])] + [(m, []) for m in submodules]
    return found


def internal_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (a package import means its __init__)."""
    return {name: {target for target, _ in imports(name) if target in MODULES and target != name} for name in MODULES}


@pytest.mark.slow
def test_core_modules_import_no_lightning_hydra_or_omegaconf():
    """One fresh interpreter imports the core modules one by one: the first that pulls a
    framework into ``sys.modules`` is named (one interpreter, not one per module: 4 s, not 80)."""
    code = f"""
import importlib, json, sys
found = {{}}
for name in {CORE!r}:
    try:
        importlib.import_module(name)
    except ImportError as missing:  # an optional extra's package, not installed here
        if (missing.name or "").startswith("swwae"):
            raise
    frameworks = sorted({{m.split('.')[0] for m in sys.modules}} & set({FRAMEWORKS!r}))
    if frameworks:
        found[name] = frameworks
        break
print(json.dumps(found))
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "{}", f"importing a core module imports a framework: {result.stdout.strip()}"


def test_layers_import_only_the_layers_below_them():
    for name in MODULES:
        targets = {target for target, _ in imports(name)}
        if name in CORE:
            above = sorted(t for t in targets if t.startswith(("swwae.training", "swwae.bench")))
            frameworks = sorted(t for t in targets if t.split(".")[0] in FRAMEWORKS)
            assert not above and not frameworks, f"core module {name} imports {above + frameworks}"
        if name.startswith("swwae.bench.harness"):
            assert not any(t.startswith("swwae.training") for t in targets), name
        if name not in COMMANDS:
            assert not any(t.startswith("swwae.commands") for t in targets), f"{name} imports the command layer"


def test_no_import_cycles():
    graph = internal_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_no_private_name_is_imported_from_another_module():
    crossing = [
        f"{name} imports {n} from {target}"
        for name in MODULES
        for target, names in imports(name)
        if target.startswith("swwae")
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert not crossing, crossing
