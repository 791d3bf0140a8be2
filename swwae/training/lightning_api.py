"""What the installed Lightning accepts, read from its source without importing it.

The trainer section (``swwae.training.trainer_settings``) passes on every argument of
Lightning's ``Trainer`` that swwae does not check itself, and checks ``precision`` against
Lightning's own list, so that a Lightning release that adds an argument or a precision needs
no change here, and a key it does not take is refused before anything loads. Importing
Lightning takes seconds (it imports torch); its source, parsed with ``ast``, milliseconds.
Where the source cannot be read so (an install without ``.py`` files, names that moved),
Lightning is imported and asked.
"""

from __future__ import annotations

import ast
import inspect
import typing
from functools import cache
from importlib.util import find_spec
from pathlib import Path

TRAINER_SOURCE = ("pytorch", "trainer", "trainer.py")  # lightning.pytorch.Trainer
PRECISION_SOURCE = ("fabric", "plugins", "precision", "precision.py")  # Lightning's precision names
PRECISION_TYPES = ("_PRECISION_INPUT_INT", "_PRECISION_INPUT_STR_ALIAS", "_PRECISION_INPUT_STR")


def source_tree(*parts: str) -> ast.Module | None:
    """The parsed source of the installed ``lightning`` package's file ``parts``, or None."""
    spec = find_spec("lightning")  # a top-level package: found, not imported
    for root in (spec.submodule_search_locations or []) if spec else []:
        try:
            return ast.parse(Path(root, *parts).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
    return None


def init_of(tree: ast.Module | None, cls: str) -> ast.FunctionDef | None:
    for node in tree.body if tree else []:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    return None


@cache
def trainer_arguments() -> tuple[str, ...]:
    """The keyword arguments of ``lightning.pytorch.Trainer``, in its order."""
    init = init_of(source_tree(*TRAINER_SOURCE), "Trainer")
    if init is not None:
        return tuple(a.arg for a in [*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs][1:])
    from lightning.pytorch import Trainer

    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in inspect.signature(Trainer.__init__).parameters.values() if p.kind in kinds)[1:]


def literal_values(node: ast.expr) -> list:
    """The constants of ``Literal[...]`` (or of several, in a ``Union``), as written."""
    if isinstance(node, ast.Subscript):
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return [v for n in inner for v in literal_values(n)]
    return [node.value] if isinstance(node, ast.Constant) else []


@cache
def takes_time_intervals() -> bool:
    """Whether ``Trainer(val_check_interval=...)`` takes a time span ("DD:HH:MM:SS", a dict):
    Lightning 2.6.5 and later do; where the source cannot be read, Lightning judges it."""
    init = init_of(source_tree(*TRAINER_SOURCE), "Trainer")
    for arg in [*init.args.args, *init.args.kwonlyargs] if init else []:
        if arg.arg == "val_check_interval" and arg.annotation is not None:
            return "timedelta" in ast.unparse(arg.annotation)
    return True


@cache
def precision_values() -> tuple | None:
    """The values ``Trainer(precision=...)`` takes (64, "bf16-mixed", ...), or None where they
    cannot be found (then Lightning alone judges them)."""
    tree = source_tree(*PRECISION_SOURCE)
    assigned = {
        n.targets[0].id: n.value
        for n in (tree.body if tree else [])
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
    }
    if all(name in assigned for name in PRECISION_TYPES):
        return tuple(v for name in PRECISION_TYPES for v in literal_values(assigned[name]))
    try:
        from lightning.fabric.plugins.precision import precision

        return tuple(v for name in PRECISION_TYPES for v in typing.get_args(getattr(precision, name)))
    except (ImportError, AttributeError):
        return None
