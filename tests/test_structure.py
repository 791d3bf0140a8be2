"""The code's shape, checked (issue 31, "a job you read top to bottom"): few functions take a
whole run config, the training package stays small, and Hydra's own state is read in one place.

A function takes a whole config when a parameter is annotated ``DictConfig`` or ``RunSpec``, is
named ``cfg``, ``config`` or ``run_config`` and read (``x[...]``, ``x.get(...)``, ``x.attr``), or
is a mapping the function reads two or more of a run config's top-level settings from
(``x["model"]``, ``x.get("trainer")``, ``x.seed``): renaming the parameter does not hide it. A
run config only handed on as data, to be stored (``SaveRunConfig(stored)`` in checkpoints, a
model folder's ``config.json``), is not read for its settings, so it is not counted; the
function that reads it (``card.RunFacts.of``) is.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers.config import ROOT
from swwae.training.spec import RunSpec

LIMIT = 10  # functions that may take a whole config: the entries, Hydra's callbacks, the readers of stored configs
MAX_TRAINING_MODULES = 30  # swwae/training/**/*.py, __init__ files too
WHOLE_NAMES = {"cfg", "config", "run_config"}
WHOLE_TYPES = ("DictConfig", "RunSpec")
RUN_KEYS = {field.alias or name for name, field in RunSpec.model_fields.items()}  # run_name, seed, model, ...

# helpers


def settings_read(function: ast.AST, name: str) -> set[str]:
    """The run config's top-level settings that ``function`` reads from its parameter ``name``."""
    keys = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == name:
            if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                keys.add(node.slice.value)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == name:
            keys.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == name
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            keys.add(node.args[0].value)
    return keys & RUN_KEYS


def is_read(function: ast.AST, name: str) -> bool:
    """Whether ``function`` reads anything from its parameter ``name`` (a key, an attribute, a
    method), rather than only handing it on."""
    return any(
        isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.value, ast.Name) and node.value.id == name
        for node in ast.walk(function)
    )


def whole_config_parameter(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The first parameter of ``function`` that is a whole run config, or None."""
    args = function.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        if arg.arg in ("self", "cls"):
            continue
        annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
        if any(t in annotation for t in WHOLE_TYPES) or (arg.arg in WHOLE_NAMES and is_read(function, arg.arg)):
            return arg.arg
        if len(settings_read(function, arg.arg)) >= 2:
            return arg.arg
    return None


def whole_config_functions(root: Path, files: list[Path]) -> list[tuple[str, str, int, str]]:
    """(file, function, line, parameter) of every function in ``files`` that takes a whole config."""
    found = []
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                param = whole_config_parameter(node)
                if param is not None:
                    found.append((path.relative_to(root).as_posix(), node.name, node.lineno, param))
    return found


def check_few_take_a_whole_config(root: Path, files: list[Path], limit: int = LIMIT) -> list:
    counted = whole_config_functions(root, files)
    listing = "\n".join(f"  {file}:{line} {name}({param})" for file, name, line, param in counted)
    assert len(counted) <= limit, f"{len(counted)} functions take a whole config (at most {limit}):\n{listing}"
    return counted


def project_files() -> list[Path]:
    return sorted((ROOT / "swwae").rglob("*.py")) + [ROOT / "train.py"]


# the project


def test_at_most_ten_functions_take_a_whole_config():
    counted = check_few_take_a_whole_config(ROOT, project_files())
    allowed = {
        ("swwae/commands/train.py", "run"),  # the Hydra entry
        ("swwae/training/run.py", "train"),  # the job's entry (tests and the epoch clock call it too)
        ("swwae/training/spec.py", "check_config"),  # reads the command line's config into the spec
        ("swwae/training/spec.py", "parse_stored"),  # reads a config a checkpoint stores
        ("swwae/stored.py", "parse_stored_config"),  # reads a config a file stores, with bounds
        ("swwae/training/folders.py", "on_run_start"),  # Hydra callbacks: Hydra calls them with a config
        ("swwae/training/folders.py", "on_multirun_start"),
        ("swwae/training/runs/sweep_claim.py", "on_multirun_start"),
        ("swwae/training/sweep/__init__.py", "on_multirun_end"),
        ("swwae/card.py", "of"),  # RunFacts.of: what a model card says of the run a stored config describes
    }
    assert {(file, name) for file, name, _, _ in counted} <= allowed, counted


def test_the_training_package_stays_small():
    modules = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "swwae" / "training").rglob("*.py"))
    assert len(modules) <= MAX_TRAINING_MODULES, f"{len(modules)} modules:\n" + "\n".join(modules)


def test_hydra_state_is_read_in_one_place():
    """``HydraConfig.get()`` in the job: only ``composing.launch`` (the command's own error
    handling for the override grammar, ``commands.overrides``, reads the sweep folder to tidy it)."""
    readers = []
    for path in project_files():
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            calls = [
                n
                for n in ast.walk(function)
                if isinstance(n, ast.Call) and ast.unparse(n.func) in ("HydraConfig.get", "HydraConfig.initialized")
            ]
            if calls:
                readers.append((path.relative_to(ROOT).as_posix(), function.name))
    assert sorted(set(readers)) == [
        ("swwae/commands/overrides.py", "remove_empty_sweep_folder"),
        ("swwae/training/composing.py", "launch"),
    ], readers


# the counter itself: it can fail

SYNTHETIC = """
from omegaconf import DictConfig

def by_name(cfg):
    return cfg.model
def by_other_name(config, x):
    return config["data"]
def by_run_config(run_config):
    return run_config.get("seed")
def stored_by_name(config):
    return write({"run_config": config})
def by_annotation(settings: DictConfig): ...
def by_spec(spec: "RunSpec"): ...
def by_use(values: dict):
    return values["model"], values.get("trainer"), values.seed
def a_section(model: dict):
    return model["lr"], model.get("beta")
def handed_on(stored: dict):
    return {"swwae_config": stored}
def one_setting(values: dict):
    return values["seed"]
"""


def test_the_counter_counts_names_annotations_and_use(tmp_path):
    module = tmp_path / "synthetic.py"
    module.write_text(SYNTHETIC)
    found = {name: param for _, name, _, param in whole_config_functions(tmp_path, [module])}
    assert found == {
        "by_name": "cfg",
        "by_other_name": "config",
        "by_run_config": "run_config",
        "by_annotation": "settings",
        "by_spec": "spec",
        "by_use": "values",  # reads model, trainer and seed from it: a whole config by another name
    }  # stored_by_name only stores its config: handed on as data


@pytest.mark.parametrize("limit, fails", [(6, False), (5, True), (0, True)])
def test_the_check_fails_above_its_limit_and_lists_the_functions(tmp_path, limit, fails):
    module = tmp_path / "synthetic.py"
    module.write_text(SYNTHETIC)
    if not fails:
        assert len(check_few_take_a_whole_config(tmp_path, [module], limit=limit)) == 6
        return
    with pytest.raises(AssertionError, match=r"6 functions take a whole config \(at most \d+\)") as failed:
        check_few_take_a_whole_config(tmp_path, [module], limit=limit)
    assert "synthetic.py:14 by_use(values)" in str(failed.value)
