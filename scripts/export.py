"""``python scripts/export.py ...`` from a clone: the same command as ``swwae export ...``
(``swwae.commands.export`` says what it does)."""

from swwae.commands.export import main

if __name__ == "__main__":
    raise SystemExit(main())
