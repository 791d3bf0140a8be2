"""What a user of this install types: the lines of help and hints that differ between a clone
and a wheel, decided in one place.

In its own folder a clone (``pip install -e .``) runs its jobs as ``python train.py`` and
``python scripts/<job>.py``, and installs an extra with ``pip install -e ".[onnx]"``. Elsewhere
those files and that ``.`` are not there (or are another project's, which ``pip install -e .``
would install instead): its jobs are the ``swwae`` command, and an extra is ``pip install -e
"<the clone>[onnx]"``. A wheel has neither the files nor a folder to install from, only the
``swwae`` command and ``pip install "swwae[onnx]"``. The help texts are written in a clone's
words, and :func:`as_installed` turns them into the words that work where the user is; messages
ask :func:`command` and :func:`install_extra`. The install is told by the package's own folder:
in a clone it sits beside the clone's ``pyproject.toml`` and ``scripts/`` (:func:`clone_root`),
in a wheel's install among other packages, with neither. (Not by how a command was called: a
library call such as ``swwae.export.export_onnx`` has no command line, and ``python
scripts/evaluate.py --help`` and ``swwae evaluate --help`` are the same help. A line that tells
how to run the running command again repeats it as it was called: :func:`this_command`.)

What this install holds of the optional extras is asked of :func:`importable`, by the package
and by its tests alike: a module of an extra not installed, or whose parent package is not
installed, is not importable (``hydra_plugins`` exists only once a Hydra plugin is there).
"""

from __future__ import annotations

import functools
import re
import shlex
import shutil
import sys
from importlib.util import find_spec
from pathlib import Path

PACKAGE = "swwae"
# each subcommand of the swwae command (swwae.commands.dispatch) that a clone also runs as a file
CLONE_FILES = {
    "train": "train.py",
    "evaluate": "scripts/evaluate.py",
    "export": "scripts/export.py",
    "probe": "scripts/probe.py",
    "project": "scripts/project.py",
    "compare": "scripts/compare_runs.py",
    "feature-study": "scripts/feature_study.py",
    "semi-map": "scripts/semi_map.py",
}
CLONE_EXTRA = re.compile(r'pip install -e "\.\[([\w,-]+)\]"')  # a clone's extra, in a help text
DOUBLE_QUOTED_SPECIALS = set('"$`\\!')  # what a shell still reads inside double quotes


@functools.cache
def clone_root() -> Path | None:
    """The clone this package is part of (its folder beside pyproject.toml and scripts/), or None."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "scripts").is_dir() else None


def in_the_clone() -> bool:
    """Whether the current folder is the clone's own: where its files and ``.`` are what a clone's
    words name."""
    root = clone_root()
    try:
        return root is not None and Path.cwd().resolve() == root
    except OSError:  # the current folder was removed
        return False


def importable(name: str) -> bool:
    """Whether the module ``name`` (dotted: ``hydra_plugins.hydra_optuna_sweeper``) can be
    imported here, found without importing it. False, not an error, where it or a parent package
    is missing: ``importlib.util.find_spec`` imports the parents of a dotted name first, and
    raises where one is not there. A parent that is there is imported (as ``import name`` would)."""
    try:
        return find_spec(name) is not None
    except ImportError:  # a parent missing, or a module, not a package
        return False
    except ValueError:  # imported already but without a spec (``__main__`` of ``python -c``), or no name
        return sys.modules.get(name) is not None


def install_extra(extra: str) -> str:
    """The command that adds an optional extra (pyproject.toml's optional-dependencies), typed
    in the current folder."""
    root = clone_root()
    if root is None:
        return f'pip install "{PACKAGE}[{extra}]"'
    if in_the_clone():
        return f'pip install -e ".[{extra}]"'
    target = f"{root}[{extra}]"
    quoted = f'"{target}"' if DOUBLE_QUOTED_SPECIALS.isdisjoint(target) else shlex.quote(target)
    return f"pip install -e {quoted}"


def command(name: str) -> str:
    """How a subcommand is typed here: ``python scripts/evaluate.py`` in a clone's own folder,
    ``swwae evaluate`` elsewhere (and for a subcommand that has no file of its own)."""
    if name in CLONE_FILES and in_the_clone():
        return f"python {CLONE_FILES[name]}"
    return f"{PACKAGE} {name}"


def this_command(name: str) -> str:
    """How the running command ``name`` was typed, for a line that says how to run it again: ``python
    <its file>`` as it was given (``python train.py``, ``python ../swwae/train.py``), ``swwae
    <name>`` (the installed script: its path where another ``swwae`` comes first on the PATH), or
    ``python -m swwae <name>``. From ``sys.argv`` and ``__main__``, which a job leaves as the process
    was started (``swwae.commands.train``); where neither is this package's command (a library call
    in a process of another program), ``command(name)``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name.partition(".")[0] == PACKAGE:  # python -m swwae, or one of its modules
        module = spec.name.removesuffix(".__main__")
        return f"python -m {module} {name}" if module == PACKAGE else f"python -m {module}"
    program = sys.argv[0] if sys.argv else ""
    if program.endswith(".py"):
        return f"python {shlex.quote(program)}"
    if Path(program).name == PACKAGE:
        on_path = shutil.which(PACKAGE)
        same = on_path is not None and Path(on_path).resolve() == Path(program).resolve()
        return f"{PACKAGE if same else shlex.quote(program)} {name}"
    return command(name)


def as_installed(text: str) -> str:
    """A help text written in a clone's words, in the words that work here: outside a clone's own
    folder, every ``python <clone file>`` becomes its ``swwae`` subcommand and every ``pip install
    -e ".[extra]"`` :func:`install_extra`'s command."""
    if in_the_clone():
        return text
    for name, file in CLONE_FILES.items():
        text = re.sub(rf"\bpython {re.escape(file)}(?!\w)", f"{PACKAGE} {name}", text)
    return CLONE_EXTRA.sub(lambda found: install_extra(found[1]), text)
