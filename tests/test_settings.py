"""The plain-Python checks of swwae.settings name what the torch registries hold: a mode or a
nonlinearity added to one and not to the other fails here, not in a user's run."""

from __future__ import annotations

import subprocess
import sys

from swwae import settings
from swwae.model import NONLINEARITIES
from swwae.pooling import POOLS


def test_the_plain_name_lists_are_the_registries():
    assert settings.POOL_MODES == tuple(POOLS)
    assert settings.NONLINEARITIES == tuple(NONLINEARITIES)


def test_the_checks_import_no_torch():
    code = (
        "import sys, swwae.settings, swwae.training.spec; "
        "print(sorted(m for m in ('torch', 'lightning', 'numpy') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
