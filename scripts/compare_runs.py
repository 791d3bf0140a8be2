"""``python scripts/compare_runs.py ...`` from a clone: the same command as ``swwae compare ...``
(``swwae.commands.compare`` says what it does)."""

from swwae.commands.compare import main

if __name__ == "__main__":
    raise SystemExit(main())
