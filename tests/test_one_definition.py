"""One name, one meaning (issue 31): a top-level function, class or module-level name of
``swwae/`` that two modules define differently is a clash, found here from the source (AST),
so that "which ``plain`` is this?" cannot creep back. The same definition twice (a constant
repeated to keep a module free of an import) is no clash; an import is no definition.

``PER_MODULE``: names every module may define for itself, on purpose (one role, each module's
own content). ``ON_PURPOSE``: a name that exactly the modules listed share on purpose, and why.
The clashes there were when this test came (issue 31) are renamed, merged or listed here; no
list of clashes left to rename remains, and none may come back.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PER_MODULE = {
    "main": "a command module's entry point (swwae.commands.<name>.main)",
    "log": "a module's logger, logging.getLogger(__name__)",
    "run": "a command module's job body, called by its main (train's is its @hydra.main function)",
    "read_runs": "a report's reading of its sweep folders into the records that report needs",
    "markdown": "a report's own table as markdown (the sweep's summary.md, each study command's <out>.md)",
    "figure": "a report command's own figure (each study command's <out>.png)",
}
ON_PURPOSE = {  # one name in exactly these modules, on purpose: name -> (modules, why)
    "SWWAE": (
        {"swwae/hub.py", "swwae/model.py"},
        "swwae.hub.SWWAE is swwae.model.SWWAE with the Hub mixin: a drop-in subclass, documented by that name",
    ),
}


def top_level(tree: ast.Module):
    """(name, the AST of what it is bound to) for each top-level definition of a module."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name, node
        elif isinstance(node, ast.Assign):
            yield from ((t.id, node.value) for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            yield node.target.id, node.value


def clashes(package: Path) -> dict[str, set[str]]:
    """{name: the modules (paths relative to the package's parent)} for every name that two
    modules of ``package`` bind to different definitions, dunder names and PER_MODULE apart."""
    bodies: dict[str, dict[str, str]] = defaultdict(dict)
    for path in sorted(package.rglob("*.py")):
        for name, node in top_level(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not (name.startswith("__") and name.endswith("__")) and name not in PER_MODULE:
                bodies[name][path.relative_to(package.parent).as_posix()] = ast.dump(node)
    return {name: set(where) for name, where in bodies.items() if len(set(where.values())) > 1}


def test_each_name_has_one_meaning_in_the_package():
    found = clashes(ROOT / "swwae")
    allowed = {name: where for name, (where, _) in ON_PURPOSE.items()}
    new = {name: sorted(where) for name, where in found.items() if where - allowed.get(name, set())}
    assert not new, f"defined differently in two modules (rename one, or import the other): {new}"
    stale = sorted(name for name, where in allowed.items() if found.get(name) != where)
    assert not stale, f"no longer defined as ON_PURPOSE lists them (drop or update them there): {stale}"


def test_the_check_finds_a_clash_and_passes_the_same_definition_twice(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text(
        "import json\nLIMIT = 32\ndef plain(v):\n    return v\nlog = 1\nclass Run: pass\n__all__ = ['plain']\n"
    )
    (package / "sub" / "b.py").write_text(
        "from json import dumps as plain_json\nLIMIT = 32\nRun: type = int\nlog = 2\n__all__ = []\n"
        "def plain(v):\n    return list(v)\n"
    )
    assert clashes(package) == {"plain": {"pkg/a.py", "pkg/sub/b.py"}, "Run": {"pkg/a.py", "pkg/sub/b.py"}}


def test_swwae_runs_and_the_job_share_their_definitions():
    """The listing reads a run's status, its mid-epoch position and the moved-aside names
    through the job's own definitions (issue 31), not copies."""
    from swwae import checkpoint_file
    from swwae.commands import runs
    from swwae.training.runs import decision, folder
    from swwae.training.runs import identity as names

    assert runs.has_finished is decision.has_finished
    assert runs.mid_epoch_position is checkpoint_file.mid_epoch_position is folder.mid_epoch_position
    assert runs.is_moved_aside is names.is_moved_aside
    assert names.is_moved_aside(names.aside_name("run", names.aside_stamp()))
    assert names.is_moved_aside(Path("x") / names.aside_name("run", "20260101-120000", 3))
    assert not names.is_moved_aside("run") and not names.is_moved_aside("run.previous-2026")
