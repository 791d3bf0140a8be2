"""``python train.py <overrides>`` from a clone: the same command as ``swwae train <overrides>``
(``swwae.commands.train`` says what it does), over this clone's own ``configs/`` folder, even
where ``swwae`` was installed from another clone. (Its @hydra.main is swwae.commands.train's: fish's
tab completion, Hydra's script, completes ``python <file>`` where the file says so.)"""

from pathlib import Path

from swwae.commands.train import main

if __name__ == "__main__":
    raise SystemExit(main(configs=Path(__file__).resolve().parent / "configs"))
