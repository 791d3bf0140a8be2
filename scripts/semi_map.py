"""``python scripts/semi_map.py ...`` from a clone: the same command as ``swwae semi-map ...``
(``swwae.commands.semi_map`` says what it does)."""

from swwae.commands.semi_map import main

if __name__ == "__main__":
    raise SystemExit(main())
