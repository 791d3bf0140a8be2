"""The package as it ships: one version (swwae/version.py, the changelog's top release), every
subpackage and config folder listed in pyproject.toml (the mapped configs folder stops
find_packages from seeing them, and setuptools ships data only in listed packages)."""

from __future__ import annotations

import re

import pytest

import swwae
from helpers.config import ROOT

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_is_the_changelogs_top_release():
    releases = re.findall(r"^## (\d+\.\d+\.\d+) - \d{4}-\d\d-\d\d$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert releases and releases[0] == swwae.__version__
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "swwae.version.__version__"}


def test_every_subpackage_and_config_folder_is_listed():
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "swwae").rglob("__init__.py")}
    configs = ROOT / "configs"
    groups = {".".join(("swwae", *p.parent.relative_to(ROOT).parts)) for p in configs.rglob("*.yaml")}
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert set(setuptools["packages"]) == folders | groups
    assert setuptools["package-dir"] == {"swwae.configs": "configs"}
