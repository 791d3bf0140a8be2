"""The plain-Python checks of swwae.settings name what the torch registries hold: a mode or a
nonlinearity added to one and not to the other fails here, not in a user's run."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
import torch

from swwae import loss_terms, settings
from swwae.errors import ConfigError
from swwae.loss import swwae_loss
from swwae.model import NONLINEARITY_LAYERS, SWWAE
from swwae.pooling import MODES, POOLS, HardWhere, SoftWhere, make_pool
from swwae.pooling import modes as pool_modes
from swwae.training.module import SWWAEModule


def test_the_plain_name_lists_are_the_registries():
    assert settings.POOL_MODES == tuple(POOLS)
    assert settings.NONLINEARITIES == tuple(NONLINEARITY_LAYERS)


def test_the_checks_import_no_torch():
    code = (
        "import sys, swwae.settings, swwae.training.spec; "
        "print(sorted(m for m in ('torch', 'lightning', 'numpy') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# the tables' plain facts are what their classes do


@pytest.mark.parametrize("mode", pool_modes.POOL_MODES.shipped)
def test_each_pooling_mode_entry_is_what_its_class_does(mode):
    """Where it records (hard switches, soft positions, none) and whether odd sizes are padded
    (ceil): the table says it before torch loads, the pool does it."""
    entry = pool_modes.POOL_MODES[mode]
    pool = make_pool(mode, channels=2, kernel_size=2, beta=10.0, wavelet="haar")
    assert type(pool) is POOLS[mode]
    what, where = pool(torch.rand(1, 2, 7, 7))
    assert type(where) is {"hard": HardWhere, "soft": SoftWhere, "none": type(None)}[entry.where]
    assert what.shape[-1] == (4 if entry.ceil else 3)
    assert entry.describe(SWWAE(widths=[4], pool_mode=mode, num_classes=None).settings)  # every field filled


def test_the_check_names_every_mode_of_the_table():
    with pytest.raises(ConfigError, match=f"^model.pool_mode='maxish' is unknown; choose one of {', '.join(MODES)}$"):
        settings.check_network(3, "maxish", 100.0, "relu", 0.0, (1, 28, 28))


def test_the_loss_weights_are_checked_by_name():
    arguments = dict(input_noise=0.0, nll_warmup_epochs=0.0, lr=1e-3, scheduler="none", arch=None)
    settings.check_training({"lambda_rec": 0.0, "lambda_m": 0.0, "lambda_nll": 1.0}, **arguments)
    settings.check_training({}, **arguments)  # the defaults
    with pytest.raises(ConfigError, match="^model.lambda_rec, lambda_m and lambda_nll must be >= 0 and not all 0$"):
        settings.check_training({t.weight: 0.0 for t in loss_terms.TERMS}, **arguments)
    with pytest.raises(ConfigError, match="not all 0"):
        settings.check_training({"lambda_m": -1.0}, **arguments)
    assert inspect.signature(SWWAEModule).parameters.keys() >= set(loss_terms.WEIGHTS)
    assert {k: inspect.signature(SWWAEModule).parameters[k].default for k in loss_terms.WEIGHTS} == loss_terms.WEIGHTS
    assert inspect.signature(swwae_loss).parameters.keys() >= set(loss_terms.WEIGHTS)
