"""Bad input answers before torch or Lightning loads, through both entry points (``python
train.py`` of a clone and the installed ``swwae train``): judged from the modules the child
imported (``python -X importtime`` lists each on stderr), never from a time. And an error
folded into one line (``swwae.errors.one_line``) is cut between words, never mid-word, and
never echoes more than a few hundred characters of what it was given."""

from __future__ import annotations

import pytest

from helpers.cli import run_cli
from helpers.config import ROOT
from swwae.errors import ConfigError, one_line

HEAVY = {"torch", "lightning", "pytorch_lightning"}
ENTRY_POINTS = {"python train.py": [ROOT / "train.py"], "swwae train": ["-m", "swwae", "train"]}
BAD_INPUT = {
    "bad beta": (["model=swwae_soft", "model.beta=0"], 2, "error: model.beta=0 is not allowed: must be > 0"),
    "bad arch": (["model.arch=(16)5x-2p"], 2, 'error: model.arch="(16)5x-2p": `(16)5x` is not a layer'),
    "kernel over its maps": (["model.kernel_size=41"], 2, "error: model stage 1 of 2: its 41x41 conv kernel"),
    "run name a path": (["run_name=../x"], 2, "error: run_name='../x' is not a name"),
    "misspelled group": (["modle=swwae_hard"], 2, "error: modle is not a setting; did you mean model?"),
    "kernel files as images": (["data=image_folder", "data.root=/proc/self"], 2, "error: image folder /proc/self"),
}


def imported(stderr: str) -> set[str]:
    """The top-level packages of ``-X importtime``'s lines."""
    lines = [line.split("|")[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")]
    return {name.split(".")[0] for name in lines[1:]}  # lines[0] is the header


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_answers_before_torch_or_lightning_loads(tmp_path, entry, case):
    overrides, status, first_words = BAD_INPUT[case]
    result = run_cli("-X", "importtime", *ENTRY_POINTS[entry], *overrides, cwd=tmp_path)
    said = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert result.returncode == status, "\n".join(said)
    assert said[0].startswith(first_words), said
    loaded = imported(result.stderr)
    assert "swwae" in loaded and not loaded & HEAVY, sorted(loaded & HEAVY)
    assert not any(tmp_path.iterdir())  # and nothing is left where it ran


@pytest.mark.parametrize("error", [RuntimeError, ConfigError])
def test_a_long_error_is_cut_between_words_and_says_so(error):
    words = "the exporter refused node max_pool2d_with_indices_backward of the graph " * 40
    line = one_line(error(words + "\n  and more"), limit=200)
    assert len(line) <= 200 and line.endswith("...") and "\n" not in line
    assert words.startswith(line.removeprefix("RuntimeError: ").removesuffix("...") + " ")  # whole words only
    assert len(one_line(error("x" * 100_000))) == 300  # one endless word: cut all the same
    assert (
        one_line(error("short  and\nsweet")) == ("RuntimeError: " if error is RuntimeError else "") + "short and sweet"
    )
