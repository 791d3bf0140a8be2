"""The job's checks of a config, in plain Python: bad input answers before torch or Lightning
is imported (``train.py`` runs them first). The config is parsed into the typed run spec
(``swwae.training.spec``), whose rules are the same functions the classes run when they are
built (``swwae.settings``, ``swwae.arch``, the run name, the resume mode, the devices), so the
words are the same. A config that parses can still fail later (a missing data set, a logger
whose package is not installed), in one line too."""

from __future__ import annotations

from swwae.training import monitor  # noqa: F401 - registers the monitor's resolvers, which the config uses
from swwae.training.spec import RunSpec, parse_run

# loggers and callbacks are instantiated as written (their classes check them); their
# interpolations may need resolvers of modules that import Lightning
AS_WRITTEN = ("logger", "callbacks")


def resolved(cfg) -> dict:
    """A job config (a DictConfig) as plain values, resolved, but loggers and callbacks."""
    from omegaconf import OmegaConf

    return {
        key: OmegaConf.to_container(cfg[key], resolve=key not in AS_WRITTEN)
        if OmegaConf.is_config(cfg._get_node(key))
        else cfg[key]
        for key in cfg
    }


def check_config(cfg) -> RunSpec:
    """Every check that needs neither torch nor Lightning, on a job config: its run spec, or
    ConfigError in one line."""
    return parse_run(resolved(cfg))
