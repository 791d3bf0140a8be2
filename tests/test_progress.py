"""The scripts' long jobs report progress (``swwae.progress``): one line per step on stderr when
it is no terminal (a log, a pipe), a bar on a terminal; stdout keeps only the results."""

from __future__ import annotations

import io
import re

from swwae.progress import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_each_step_is_a_line_on_stderr_as_it_starts(capsys):
    seen = []
    for step in progress(["pixels", "random weights", "swwae_hard"], "probe"):
        seen.append(step)
        assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f": {step}")  # before the step runs
    assert seen == ["pixels", "random weights", "swwae_hard"]
    captured = capsys.readouterr()
    assert captured.out == ""
    assert re.fullmatch(r"probe: 3 done \(\d+ s\)\n", captured.err)


def test_the_lines_count_the_steps_and_name_them(capsys):
    list(progress(iter([("a", 1), ("b", 2)]), "export", name=lambda step: step[0], total=2))
    lines = capsys.readouterr().err.splitlines()
    assert [re.sub(r"\(\d+ s\)", "(t)", line) for line in lines] == [
        "export 1/2 (t): a",
        "export 2/2 (t): b",
        "export: 2 done (t)",
    ]


def test_one_step_is_one_line_unless_a_summary_says_more(capsys):
    list(progress(["m/"], "export"))
    assert [line.split(" (")[0] for line in capsys.readouterr().err.splitlines()] == ["export 1/1"]
    list(progress([range(25)], "reading pets", summary="25 images read"))
    assert [line.split(" (")[0] for line in capsys.readouterr().err.splitlines()] == [
        "reading pets 1/1",
        "reading pets: 25 images read",
    ]


def test_without_a_length_the_steps_are_numbered(capsys):
    list(progress((n for n in range(2)), "reading"))
    assert [line.split(" (")[0] for line in capsys.readouterr().err.splitlines()] == [
        "reading 1",
        "reading 2",
        "reading: 2 done",
    ]


def test_on_a_terminal_it_is_a_bar(capsys):
    terminal = Terminal()
    assert list(progress(["x", "y"], "probe", stream=terminal)) == ["x", "y"]
    drawn = terminal.getvalue()
    assert "probe: 100%" in drawn and "2/2" in drawn and "\r" in drawn  # redrawn in place
    assert capsys.readouterr().err == ""
