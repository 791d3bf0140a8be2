"""The optional extras of ``pyproject.toml``, as the tests meet them. ``EXTRAS`` is the one table
of the extras a test or a docs block can need and the modules each must find; a test that needs
one is marked ``@pytest.mark.extra("optuna")`` (a docs block starts with ``# needs: onnx``), and
``conftest.py`` skips it, with the pip command of :func:`missing`, where the extra is not
installed. :func:`dev_install_lacks` tells what an install with only the ``dev`` extra (the
README's ``pip install -e ".[dev]"``) would not have of this one: ``tests/test_extras.py``
collects the suite without it."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, distribution, entry_points, packages_distributions

from packaging.requirements import Requirement  # packaging: a dependency of pytest itself
from packaging.utils import canonicalize_name

from swwae.install import PACKAGE, importable, install_extra

# extra -> the modules its tests import (a Hydra plugin: its module in the hydra_plugins namespace)
EXTRAS = {
    "mlflow": ("mlflow",),
    "onnx": ("onnx", "onnxscript", "onnxruntime"),
    "hub": ("huggingface_hub",),
    "optuna": ("hydra_plugins.hydra_optuna_sweeper",),
    "slurm": ("hydra_plugins.hydra_submitit_launcher",),
    "wandb": ("wandb",),
}
DEV = "dev"  # the extra of the README's test command


def missing(extra: str) -> str | None:
    """Why a test that needs ``extra`` cannot run here (the skip reason), or None if it can."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}: name one of {', '.join(EXTRAS)} (tests/helpers/extras.py)")
    if all(importable(module) for module in EXTRAS[extra]):
        return None
    return f"needs the {extra} extra: {install_extra(extra)}"


def installed(requirements: list[tuple[str, set[str]]]) -> set[str]:
    """The installed distributions that ``requirements`` (name, extras asked for) bring, with
    everything they require in turn (their markers evaluated here), as canonical names."""
    found: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(canonicalize_name(name), frozenset(extras)) for name, extras in requirements]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:  # not installed here: nothing of it to have
            continue
        found.add(name)
        for line in requires:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": extra}) for extra in {"", *extras}):
                todo.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return found


def dev_install_lacks() -> tuple[set[str], set[str]]:
    """What this install has that ``pip install -e ".[dev]"`` alone would not: the top-level
    modules of the distributions that only the other extras bring (directly or through their own
    requirements; a module shared with a kept distribution, a namespace such as ``google``, is
    kept), and the pytest plugins those distributions register. Read from the installed
    metadata, so an extra added to pyproject.toml is counted without a change here."""
    extras = set(distribution(PACKAGE).metadata.get_all("Provides-Extra") or []) - {DEV}
    kept = installed([(PACKAGE, {DEV})])
    lacking = installed([(PACKAGE, extras)]) - kept
    modules = {
        module
        for module, names in packages_distributions().items()
        if {canonicalize_name(name) for name in names} <= lacking
    }
    plugins = {point.name for point in entry_points(group="pytest11") if canonicalize_name(point.dist.name) in lacking}
    return modules, plugins


def hide_package(monkeypatch, name: str) -> None:
    """As if package ``name`` were not installed: ``import name`` raises, and none of its modules
    that an earlier test in this process imported (Hydra imports every installed plugin when it
    composes) is answered from ``sys.modules``."""
    monkeypatch.setitem(sys.modules, name, None)
    for module in [m for m in sys.modules if m.startswith(f"{name}.")]:
        monkeypatch.delitem(sys.modules, module)
