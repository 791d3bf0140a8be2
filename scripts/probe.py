"""``python scripts/probe.py ...`` from a clone: the same command as ``swwae probe ...``
(``swwae.commands.probe`` says what it does)."""

from swwae.commands.probe import main

if __name__ == "__main__":
    raise SystemExit(main())
