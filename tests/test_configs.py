"""The configs read like a table of contents: every option list in a comment (``a | b | c``)
is true, listing exactly the files of its config group, or exactly the values the code
accepts for that key; the value set is one of them."""

from __future__ import annotations

import re

import pytest

from helpers.config import CONFIG_DIR
from swwae.pooling import MODES
from swwae.settings import NONLINEARITIES, SCHEDULERS
from swwae.training.runs.decision import RESUME_MODES

# an option list at the start of a comment: `# a | b | c` (then anything after `:` or `(`)
OPTIONS = re.compile(r"#\s*([\w./-]+(?:\s*\|\s*[\w./-]+)+)\s*(?:$|[:(,])")
GROUP_ENTRY = re.compile(r"^\s*-\s*(?:override\s+)?/?([\w/]+):\s*([\w./-]+)\s*#")
KEY_ENTRY = re.compile(r"^\s*([\w.]+):\s*([^#\s]+)\s*#")
# the keys whose values the code checks, with the values it accepts
KEY_VALUES = {
    "nonlinearity": NONLINEARITIES,
    "pool_mode": MODES,
    "scheduler": SCHEDULERS,
    "resume": RESUME_MODES,
}


def option_comments() -> list[tuple[str, int, str, list[str]]]:
    """(file, line number, line, listed options) of every option-list comment in configs/."""
    found = []
    for path in sorted(CONFIG_DIR.rglob("*.yaml")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            match = OPTIONS.search(line)
            if match:
                options = [o.strip() for o in match.group(1).split("|")]
                found.append((str(path.relative_to(CONFIG_DIR)), number, line, options))
    return found


def group_options(group: str) -> set[str]:
    return {p.stem for p in (CONFIG_DIR / group).glob("*.yaml")}


COMMENTS = option_comments()


def test_there_are_option_lists_to_check():
    assert len(COMMENTS) >= 8  # the defaults list and the model's keys at least


@pytest.mark.parametrize("where, number, line, options", COMMENTS, ids=[f"{c[0]}:{c[1]}" for c in COMMENTS])
def test_each_option_list_in_a_comment_is_true(where, number, line, options):
    if entry := GROUP_ENTRY.match(line):
        group, value = entry.groups()
        assert set(options) == group_options(group), (
            f"{where}:{number} lists {options}, configs/{group}/ holds {sorted(group_options(group))}"
        )
    elif entry := KEY_ENTRY.match(line):
        key, value = entry.groups()
        assert key in KEY_VALUES, f"{where}:{number}: `{key}` lists options no test checks: add it to KEY_VALUES"
        assert set(options) == set(KEY_VALUES[key]), (
            f"{where}:{number} lists {options}, the code takes {list(KEY_VALUES[key])}"
        )
    else:
        pytest.fail(f"{where}:{number}: an option list that belongs to no group entry or key: {line.strip()}")
    assert value in options or value == "null", f"{where}:{number}: {value} is not among its own options"


def test_every_config_group_is_listed_in_the_defaults_with_its_options_or_its_one_option():
    defaults = (CONFIG_DIR / "train.yaml").read_text().split("\n\n")[0]
    groups = {p.name for p in CONFIG_DIR.iterdir() if p.is_dir()} - {"local"}
    listed = {
        m.group(1)
        for m in (GROUP_ENTRY.match(line) or re.match(r"^\s*-\s*([\w/]+):", line) for line in defaults.splitlines())
        if m
    }
    assert groups <= listed | {"experiment"}, f"groups missing from train.yaml's defaults: {groups - listed}"
