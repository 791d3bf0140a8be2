"""The shipped configs and how Hydra reads them: the one place that says where they are.

They are the package ``swwae.configs`` (``configs/`` of a clone, shipped as package data), read
through Hydra's ``pkg://`` search path, so the job finds them from a wheel as from a clone and
writes where the user stands. A lab's own folder extends or overrides them: ``swwae train
--config-dir my_configs experiment=mine`` (Hydra puts it before the shipped configs), or
``hydra.searchpath=[file://my_configs]`` in a config (after them: adds presets, overrides none).

The configs use swwae's own OmegaConf resolvers (``${swwae.default_monitor:}``, the run name's
``${swwae.arch_tag:}``); ``register_resolvers`` is called by every module that composes, before
Hydra does: the job, sweepers that resolve a config before any job runs (Optuna), the tests.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.util import find_spec
from pathlib import Path

from swwae.errors import ConfigError

CONFIG_MODULE = "swwae.configs"
CONFIG_PATH = f"pkg://{CONFIG_MODULE}"
CONFIG_NAME = "train"


def check_installed() -> None:
    """The configs are part of the install: an editable install made before they were (0.2 and
    earlier) does not map ``configs/`` to ``swwae.configs``, which is one line, not Hydra's
    traceback."""
    if find_spec(CONFIG_MODULE) is None:
        raise ConfigError(
            f"the shipped configs ({CONFIG_MODULE}) are not installed with this swwae: install it again "
            "(pip install -e . in a clone, pip install swwae otherwise)"
        )


def register_resolvers() -> None:
    """OmegaConf's resolvers of the shipped configs (importing their modules registers them)."""
    import swwae.training.monitor  # noqa: F401 - swwae.default_monitor, swwae.monitor_mode, swwae.arch_tag


def presets(group: str) -> list[str]:
    """The names of a config group's presets, e.g. ``presets("experiment/paper")``."""
    folder = files(CONFIG_MODULE).joinpath(group)
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def compose_train(overrides=(), *, return_hydra_config: bool = False):
    """The train config as ``swwae train <overrides>`` composes it (outside a Hydra run: the
    benchmarks, the tests). Hydra's global state is cleared first, and left cleared."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    check_installed()
    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        return compose(CONFIG_NAME, overrides=list(overrides), return_hydra_config=return_hydra_config)


def compose_run(overrides, output_dir: Path):
    """The config a run of ``swwae train <overrides>`` sees, its output folder ``output_dir``:
    Hydra's own part set as ``HydraConfig`` and removed from the job's config, as in a real
    run (for the code that calls the job in-process: the epoch clock, the tests)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    cfg = compose_train(overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.output_dir = cfg.hydra.runtime.output_dir = str(output_dir)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg
