"""Where the checkout's programs are: ``train.py``, ``configs/`` and ``scripts/`` live at the
repository root, beside the ``swwae`` package (a clone, or ``pip install -e .`` of one), not in
the current folder. A package installed without its checkout has none of them: that is one
error line, not a traceback."""

from __future__ import annotations

from pathlib import Path

from swwae.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]  # swwae/commands/checkout.py -> the repository root


def checkout_file(relative: str, needs: tuple[str, ...] = ()) -> Path:
    """``ROOT / relative``, or ConfigError naming what is missing, where and why, if it (or a
    path of ``needs`` it goes with) is not there."""
    missing = [p for p in (relative, *needs) if not (ROOT / p).exists()]
    if missing:
        raise ConfigError(
            f"{' and '.join(missing)} not found in {ROOT}: this subcommand runs the checkout's own "
            "programs, so it needs swwae installed from a clone (pip install -e .)"
        )
    return ROOT / relative
