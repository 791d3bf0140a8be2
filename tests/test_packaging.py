"""The package as it ships: one version, swwae/version.py, the changelog's top release (what
ships, and that a wheel runs, tests/test_wheel.py checks)."""

from __future__ import annotations

import re

import swwae
from helpers.config import ROOT


def test_the_version_is_the_changelogs_top_release():
    releases = re.findall(r"^## (\d+\.\d+\.\d+) - \d{4}-\d\d-\d\d$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert releases and releases[0] == swwae.__version__


def test_the_oldest_pins_are_the_declared_lower_bounds_of_the_requirements_and_the_dev_extra():
    """``scripts/oldest_pins.py``: the constraints of the oldest stack the ranges admit."""
    from scripts.oldest_pins import oldest_pins

    declared = {
        "project": {
            "dependencies": ["torch>=2.4", "hydra-core>=1.3.2,<1.4", "plain", "pillow>=10.1  "],
            "optional-dependencies": {"dev": ["mkdocstrings[python]>=0.26", "x<2,>=1.5"], "docs": ["mkdocs>=1.6"]},
        }
    }
    assert oldest_pins(declared) == ["torch==2.4", "hydra-core==1.3.2", "pillow==10.1", "mkdocstrings==0.26", "x==1.5"]
