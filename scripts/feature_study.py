"""``python scripts/feature_study.py ...`` from a clone: the same command as ``swwae feature-study ...``
(``swwae.commands.feature_study`` says what it does)."""

from swwae.commands.feature_study import main

if __name__ == "__main__":
    raise SystemExit(main())
