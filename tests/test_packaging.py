"""The package as it ships: one version, swwae/version.py, the changelog's top release (what
ships, and that a wheel runs, tests/test_wheel.py checks)."""

from __future__ import annotations

import re

import swwae
from helpers.config import ROOT


def test_the_version_is_the_changelogs_top_release():
    releases = re.findall(r"^## (\d+\.\d+\.\d+) - \d{4}-\d\d-\d\d$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert releases and releases[0] == swwae.__version__
