"""Errors that mean "the user asked for something that cannot work".

``train.py`` and the scripts print these as one line and exit non-zero, instead of a
traceback: a wrong config value, a missing or corrupt dataset, a bad checkpoint.
"""


class ConfigError(ValueError):
    """A bad config value or input; the message alone tells the user what to change."""
