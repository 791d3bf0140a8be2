"""Pins of the oldest releases ``pyproject.toml`` admits, for a constraints file: the project's
requirements and its dev extra, each at its lower bound, so that one install tests the ranges
as they are declared (no second list to keep in step with them).

    python scripts/oldest_pins.py > oldest.txt
    pip install -e ".[dev]" -c oldest.txt && pytest

A requirement without a lower bound (``>=``) is left out, and so are those of the other extras
(their own pages say which releases were tested). docs/development.md ("Versions") says what
the oldest stack found.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
LOWER_BOUND = re.compile(r"^([A-Za-z0-9_.-]+)[^;]*?>=\s*([^,;\s]+)")  # name, then >= before any marker


def oldest_pins(pyproject: dict) -> list[str]:
    """``name==lower bound`` of each requirement of the project and of its dev extra that has one."""
    project = pyproject["project"]
    requirements = project["dependencies"] + project["optional-dependencies"].get("dev", [])
    pins = []
    for requirement in requirements:
        found = LOWER_BOUND.match(requirement)
        if found:
            pins.append("==".join(found.groups()))
    return pins


if __name__ == "__main__":
    try:  # here, not at the top: oldest_pins() is imported (and tested) on Python 3.10 too
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        sys.exit("oldest_pins.py: needs Python 3.11 or later (tomllib)")
    print("\n".join(oldest_pins(tomllib.loads(PYPROJECT.read_text()))))
