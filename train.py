"""``python train.py <overrides>`` from a clone: the same command as ``swwae train <overrides>``
(``swwae.commands.train`` says what it does)."""

from swwae.commands.train import main

if __name__ == "__main__":
    raise SystemExit(main())
