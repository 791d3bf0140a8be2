"""Every bad-input command of the README prints exactly one line, stdout and stderr together
(a caret line under a bad layer string counts with its error), exits with status 2, prints what
the README shows, and leaves nothing behind in the folder it ran in."""

from __future__ import annotations

import shlex

import pytest

from helpers.cli import run_cli
from helpers.docs import ROOT, code_blocks

README_HOME = "/home/me/swwae"  # where the README's example ran


def readme_examples() -> list[tuple[str, list[str]]]:
    """(command, the lines it prints) of the README's `$ python train.py ...` blocks."""
    examples = []
    for block in code_blocks("", pages=[ROOT / "README.md"]):
        for line in block.source.splitlines():
            if line.startswith("$ python train.py"):
                examples.append((line[2:], []))
            elif examples:
                examples[-1][1].append(line)
    return examples


EXAMPLES = readme_examples()


def test_the_readme_shows_bad_input_examples():
    assert len(EXAMPLES) >= 4 and all(lines and lines[0].startswith("error: ") for _, lines in EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("command, shown", EXAMPLES, ids=[command for command, _ in EXAMPLES])
def test_each_bad_input_command_of_the_readme_is_one_line(tmp_path, command, shown):
    args = shlex.split(command)[1:]  # without "python"
    result = run_cli(ROOT / args[0], *args[1:], cwd=tmp_path)
    lines = (result.stdout + result.stderr).strip("\n").splitlines()
    assert result.returncode == 2, result.stderr[-2000:]
    carets = [line for line in lines[1:] if set(line.strip()) == {"^"}]
    assert len(lines) == 1 + len(carets) <= 2, lines
    assert lines == [line.replace(README_HOME, str(tmp_path)) for line in shown]
    assert list(tmp_path.iterdir()) == []  # no outputs/, checkpoints/ or logs/ left behind


@pytest.mark.slow
def test_a_run_leaves_its_log_lines_in_train_log_or_no_train_log(tmp_path):
    from helpers.cli import train_cli

    quiet = train_cli(tmp_path, "model.widths=[4]", name="quiet")  # logs nothing of its own
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert not (tmp_path / "outputs" / "quiet" / "train.log").exists()
    again = train_cli(tmp_path, "model.widths=[4]", "trainer.max_epochs=2", name="again")  # says it continues
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resume=auto: continuing this run from" in (tmp_path / "outputs" / "again" / "train.log").read_text()
