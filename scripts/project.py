"""``python scripts/project.py ...`` from a clone: the same command as ``swwae project ...``
(``swwae.commands.project`` says what it does)."""

from swwae.commands.project import main

if __name__ == "__main__":
    raise SystemExit(main())
