"""``python scripts/evaluate.py ...`` from a clone: the same command as ``swwae evaluate ...``
(``swwae.commands.evaluate`` says what it does)."""

from swwae.commands.evaluate import main

if __name__ == "__main__":
    raise SystemExit(main())
