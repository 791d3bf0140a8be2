"""The schema of every setting (swwae.settings): read before torch loads, one line for a bad
value, and open to what a lab registers (a pooling mode's settings, a loss term's weight)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from swwae import settings
from swwae.errors import ConfigError
from swwae.loss_terms import TERMS
from swwae.model import SWWAE
from swwae.pooling import MODES, HardWhere, SoftWhere, make_pool
from swwae.pooling.modes import POOL_MODES


def test_the_checks_import_no_torch():
    code = (
        "import sys, swwae.settings, swwae.datasets, swwae.training.spec; "
        "print(sorted(m for m in ('torch', 'lightning', 'numpy') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("mode", POOL_MODES.shipped)
def test_each_pooling_mode_does_what_its_entry_says(mode):
    """Where it records (hard switches, soft positions, none) and whether odd sizes are padded
    (ceil): the table says it before torch loads, the pool does it."""
    entry = POOL_MODES[mode]
    pool = make_pool(mode, channels=2, kernel_size=2)
    what, where = pool(torch.rand(1, 2, 7, 7))
    assert type(where) is {"hard": HardWhere, "soft": SoftWhere, "none": type(None)}[entry.where]
    assert what.shape[-1] == (4 if entry.ceil else 3)
    assert entry.describe(SWWAE(widths=[4], pool_mode=mode, num_classes=None).settings)  # every field filled


def test_the_check_names_every_mode_of_the_table():
    with pytest.raises(ConfigError, match=f"^model.pool_mode='maxish' is unknown; choose one of {', '.join(MODES)}$"):
        settings.check_network(3, "maxish", "relu", 0.0, (1, 28, 28))


def test_the_loss_weights_are_checked_together_by_name():
    settings.check_training({"lambda_rec": 0.0, "lambda_m": 0.0, "lambda_nll": 1.0}, arch=None)
    settings.check_training({}, arch=None)  # the defaults
    with pytest.raises(ConfigError, match="^model.lambda_rec, lambda_m and lambda_nll must be >= 0 and not all 0$"):
        settings.check_training({t.weight: 0.0 for t in TERMS.values()}, arch=None)
    with pytest.raises(ConfigError, match="never trains"):
        settings.check_training({"lambda_nll": 0.0}, arch="(8)3c-2p-10fc")


@pytest.mark.parametrize(
    "values, message",
    [
        ({"lr": -1}, "^model.lr=-1 is not allowed: must be > 0$"),
        ({"weight_decay": -1}, "^model.weight_decay=-1 is not allowed: must be >= 0$"),
        ({"beta": 1e400}, "^model.beta=inf is not allowed: must be a finite number$"),
        ({"beta": 1e308}, "^model.beta=1e\\+308 is not allowed: must be > 0 and <= 10000$"),  # no float32 holds it
        ({"dropout": 1}, "^model.dropout=1 is not allowed: must be >= 0 and < 1$"),
        ({"widths": [32, "a"]}, "^model.widths.1='a' is not allowed"),
        ({"lambda_m": -0.5}, "^model.lambda_m=-0.5 is not allowed: must be >= 0$"),
        ({"nonlinearity": "swish"}, "^model.nonlinearity='swish' is not allowed: must be 'relu', "),
        ({"betta": 3}, "^model.betta is not a setting; did you mean model.beta\\?$"),
    ],
)
def test_a_bad_model_setting_is_one_line_naming_it(values, message):
    with pytest.raises(ConfigError, match=message):
        settings.parse(settings.model_settings(), values, "model")


def test_every_setting_has_help():
    """The tables of docs/configs.md are made from the schema: a setting without help would be a
    row that says nothing."""
    from swwae.datasets import DATA_SETS

    for schema in (settings.model_settings(), *(entry.settings for entry in DATA_SETS.values())):
        missing = [name for name, text in schema.help().items() if not text]
        assert not missing, f"{schema.__name__}: {missing}"


def test_the_settings_tables_of_the_docs_are_the_schemas():
    """docs/configs.md's tables are written from the schema (python scripts/settings_table.py)."""
    from scripts.settings_table import PAGE, written

    assert written(PAGE.read_text()) == PAGE.read_text(), "run python scripts/settings_table.py"
