"""The shipped configs and how Hydra reads them: the one place that says where they are.

They are the package ``swwae.configs`` (``configs/`` of a clone, shipped as package data), read
through Hydra's ``pkg://`` search path, so the job finds them from a wheel as from a clone and
writes where the user stands; a clone's ``train.py`` names its own ``configs/`` folder instead
(``config_path``). A lab's own folder extends or overrides them: ``swwae train
--config-dir my_configs experiment=mine`` (Hydra puts it before the shipped configs), or
``hydra.searchpath=[file://my_configs]`` in a config (after them: adds presets, overrides none).

The configs use swwae's own OmegaConf resolvers (``${swwae.default_monitor:}``, the run name's
``${swwae.arch_tag:}``); ``register_resolvers`` is called by every module that composes, before
Hydra does: the job, sweepers that resolve a config before any job runs (Optuna), the tests.

The monitor: which validation metric picks ``best.ckpt`` and is returned to sweepers.
By default it follows what the model trains: a run that trains a classifier on few labels
(``data.num_labels`` set, or STL-10's unlabelled images) or on nothing else (``lambda_rec = lambda_m = 0``) is judged by
``val/acc``; a model that trains reconstructions only (no classifier head: lambda_nll = 0,
or a ``model.arch`` without an ``Nfc`` token) by ``val/recon_mse``; a fully labelled SWWAE,
which trains both, by its reconstruction. A checkpoint picked by a metric the model never
trains (a classifier-only run by its untrained decoder) would make every comparison built on it wrong.

The configs reach these rules through two OmegaConf resolvers (registered on import)::

    optimized_metric: ${swwae.default_monitor:}
    optimized_mode: ${swwae.monitor_mode:${optimized_metric}}

so that an explicit ``optimized_metric=...`` still wins, and sweepers (Optuna's
``direction``) see the resolved values before any job runs.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from swwae.errors import ConfigError, UserError, excerpt
from swwae.install import importable
from swwae.loss_terms import trains_reconstruction
from swwae.settings import trains_classifier
from swwae.training.callback_settings import is_tensorboard
from swwae.training.runs import identity  # noqa: F401 - registers the run name's ${swwae.arch_tag:}

CONFIG_MODULE = "swwae.configs"
CONFIG_PATH = f"pkg://{CONFIG_MODULE}"
CONFIG_NAME = "train"


def config_path(folder: Path | None = None) -> str:
    """Where Hydra reads the configs: a clone's own ``configs/`` folder (``folder``, named by the
    clone's ``train.py``) when it holds ``train.yaml``, else the package's (``CONFIG_PATH``). So
    ``python train.py`` in a clone runs that clone's configs, even where ``swwae`` was installed
    from another clone (whose ``swwae.configs`` is that other clone's folder)."""
    if folder is not None and (Path(folder) / f"{CONFIG_NAME}.yaml").is_file():
        return str(Path(folder).absolute())
    return CONFIG_PATH


def check_installed() -> None:
    """The configs are part of the install: an editable install made before they were (0.2 and
    earlier) does not map ``configs/`` to ``swwae.configs``, which is one line, not Hydra's
    traceback."""
    if not importable(CONFIG_MODULE):
        raise ConfigError(
            f"the shipped configs ({CONFIG_MODULE}) are not installed with this swwae: install it again "
            "(pip install -e . in a clone, pip install swwae otherwise)"
        )


def register_resolvers() -> None:
    """What Hydra needs before it composes: OmegaConf's resolvers of the shipped configs
    (``swwae.default_monitor``, ``swwae.monitor_mode``: the monitor, below; ``swwae.arch_tag``:
    the run name's), and every setting's default from the schema (``store_settings``). Called
    by every module that composes, again should they have been cleared."""
    register_monitor_resolvers()
    identity.register_resolver()
    store_settings()
    share_config_store()


def share_config_store() -> None:
    """Copies of Hydra's ConfigStore are the store itself. Hydra 1.3 deep-copies its config
    repository, and with it the whole store, each time it composes or lists a config group (136
    times for ``--help``); the schema's nodes (``store_settings``) made that 3 s of ``--help`` and
    a tenth of a second of every bad-input answer. The store is a singleton that loading never
    changes (``ConfigStore.load`` copies the node it returns), so sharing it changes no config;
    Hydra's own later fix reads the singleton afresh instead of holding it (hydra PR 2928)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.__deepcopy__ = lambda store, memo: store


def store_settings() -> None:
    """Every setting at its default, from the schema (``swwae.settings``), in Hydra's ConfigStore:
    ``settings/run`` (the run's own top-level settings, ``swwae.training.run_settings.RunSettings``,
    which ``train.yaml`` starts from), ``settings/paths`` (where it writes, ``PathSettings`` there),
    ``settings/model`` (the model section, with every registered pooling mode's settings and loss
    term's weight), ``settings/data/<name>`` (each data set of the table: its class, its settings,
    its seed the run's) and ``settings/callbacks`` (swwae's own callbacks,
    ``swwae.training.callback_settings``: each one's class and settings, one node: each entry of a
    defaults list costs Hydra a few milliseconds of every command). A config of a group starts from
    them (``- /settings@_here_: model``) and holds only what it changes, and every key can be
    overridden on the command line (``model.beta=10``). A registered data set that ships no config
    file is an option of the ``data`` group as it is."""
    global _stored_for
    from hydra.core.config_store import ConfigStore

    from swwae.datasets import DATA_SETS
    from swwae.loss_terms import TERMS
    from swwae.pooling.modes import POOL_MODES
    from swwae.settings import model_settings
    from swwae.stored import plain
    from swwae.training.callback_settings import CALLBACKS
    from swwae.training.run_settings import PathSettings, RunSettings

    # a lab's data/<name>.yaml (its registered set's config, docs/architecture.md) meets the node
    # stored below: Hydra merges the file onto it, as a config's own defaults would, and warns in
    # four lines, twice, of a deprecated match; the same config either way
    warnings.filterwarnings("ignore", SCHEMA_MATCH)
    tables = tuple((name, id(entry)) for table in (POOL_MODES, TERMS, DATA_SETS) for name, entry in table.items())
    if tables == _stored_for:  # the nodes follow the tables: stored again only when one changed
        return
    store = ConfigStore.instance()
    store.store(group="settings", name="run", node=plain(RunSettings().model_dump()))
    store.store(group="settings", name="paths", node=plain(PathSettings().model_dump()))
    store.store(group="settings", name="model", node=plain(model_settings()().model_dump()))
    callbacks = {c.name: {"_target_": c.target, **plain(c.settings().model_dump())} for c in CALLBACKS.values()}
    store.store(group="settings", name="callbacks", node=callbacks)
    for entry in DATA_SETS.values():
        node = {"_target_": entry.target, **plain(entry.settings().model_dump()), "seed": "${seed}"}
        store.store(group="settings/data", name=entry.name, node=node)
        if entry.name not in DATA_SETS.shipped:  # a lab's own: data=<name> needs no config file
            store.store(group="data", name=entry.name, node=node)
    _stored_for = tables


SCHEMA_MATCH = r"\s*'data/[^']+' is validated against ConfigStore schema with the same name"  # Hydra's warning
_stored_for: tuple = ()  # the tables' entries when store_settings last stored their nodes


@dataclass(frozen=True)
class Launch:
    """What Hydra knows of a job beyond its config: the option chosen in each config group
    (``model``, ``data``, ...), the command-line overrides, the output folder, and in a multirun
    the sweep folder and the job's number. Read once, by ``launch()`` at the job's entry, and
    passed down as values; empty outside a Hydra app (the tests, the epoch clock)."""

    choices: dict = field(default_factory=dict)
    overrides: tuple[str, ...] = ()
    output_dir: str | None = None
    sweep: tuple[Path, int] | None = None  # (sweep folder, job number) of a multirun job
    log_file: str = "train.log"  # the job's log in output_dir (a DDP process of Lightning's: its own)


def launch() -> Launch:
    """This job's ``Launch``: the one reader of Hydra's global state (``HydraConfig``) in the job."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return Launch()
    hydra = HydraConfig.get()
    sweep = (Path(hydra.sweep.dir), int(hydra.job.num)) if hydra.mode == RunMode.MULTIRUN else None
    output_dir, log_file = hydra.runtime.get("output_dir"), f"{hydra.job.name}.log"
    return Launch(dict(hydra.runtime.choices), tuple(hydra.overrides.task), output_dir, sweep, log_file)


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


# building: the job's parts from their config nodes (anything with a ``_target_``), the loggers
# (the Trainer: swwae.training.checkpoints). Never on a config read from a file: those are parsed
# (swwae.training.spec)


def build(node, **kwargs):
    """``hydra.utils.instantiate``, but our own errors come out unwrapped (one line)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        if isinstance(err.__cause__, UserError):
            raise err.__cause__ from None
        raise ConfigError(str(err).replace("\n", " ")) from err


def build_all(nodes: Mapping | None) -> list:
    """The objects of a config section of named nodes (``callbacks``), in order; a node set to
    null is switched off (``callbacks.reconstruction_images=null``, as ``~callbacks.<name>``)."""
    return [build(node) for node in (nodes or {}).values() if node is not None]


def latest_version(save_dir: str, name: str) -> int | None:
    """The newest version folder of this run (TensorBoard's, CSV's), so a resumed run continues its curves."""
    root = Path(save_dir) / name
    versions = [int(p.name.split("_")[1]) for p in root.glob("version_*") if p.name.split("_")[1].isdigit()]
    return max(versions) if versions else None


def build_loggers(configured: Mapping | None, resumed: Mapping | None) -> list:
    """The loggers of the config's ``logger`` section. A resumed run (``resumed``: the checkpoint
    it continues) continues its curves where they are: TensorBoard's and CSV's newest version,
    the MLflow and W&B runs that logged the checkpoint (``swwae.training.callbacks``: ``continue_csv``,
    ``mlflow_run_to_continue``, ``stored_run_id``). A logger set to null is switched off (``logger.csv=null``)."""
    from swwae.training.callbacks import continue_csv, mlflow_run_to_continue, stored_run_id

    loggers = []
    for logger in (configured or {}).values():
        if logger is None:
            continue
        extra, kind = {}, str(logger.get("_target_") or "").rpartition(".")[2]
        if resumed is not None and (is_tensorboard(kind) or kind == "CSVLogger"):
            extra["version"] = latest_version(logger.save_dir, logger.name)
        if resumed is not None and kind == "MLFlowLogger":
            extra["run_id"] = mlflow_run_to_continue(logger, resumed)
        if resumed is not None and kind == "WandbLogger" and not (logger.get("id") or logger.get("version")):
            extra["id"] = stored_run_id(resumed, "wandb")  # an id of the user's own wins
        built = build(logger, **extra)
        if resumed is not None and kind == "CSVLogger":
            continue_csv(built, resumed.get("global_step", 0))
        loggers.append(built)
    return loggers


# the monitor (module docstring)
def has_classifier(model: Mapping) -> bool:
    """A classifier head that trains (``swwae.model.trains_classifier``)."""
    try:
        return trains_classifier(model)
    except ConfigError:  # the model reports a bad string itself, with a caret under the token
        return True


def default_monitor(model: Mapping, data: Mapping) -> str:
    """The validation metric the model trains (see "The monitor" above)."""
    semi_supervised = data.get("num_labels") is not None or bool(data.get("unlabelled"))  # STL-10's 100,000
    if has_classifier(model) and (semi_supervised or not trains_reconstruction(model)):
        return "val/acc"
    return "val/recon_mse"


def monitor_mode(metric: str) -> str:
    """Accuracies (``val/acc``, ``val/knn_acc``) are maximised, errors and losses minimised."""
    name = str(metric).rsplit("/", 1)[-1]
    return "max" if name.startswith("acc") or name.endswith("_acc") else "min"


def check_monitor(metric: str, mode: str, logged: list[str]) -> None:
    """``metric`` must be one of the validation metrics the model logs: ModelCheckpoint
    watches it at every validation, and sweepers read it at the end."""
    if metric not in logged:
        raise ConfigError(
            f"optimized_metric={excerpt(metric)} is not a validation metric of this model; "
            f"choose one of {', '.join(sorted(logged))}"
        )
    check_mode(mode, metric)


def check_mode(mode, metric: str | None = None) -> str:
    """min or max, and for a ``metric`` the way it gets better: a monitor the wrong way round
    keeps the worst epoch as ``best.ckpt`` and runs a search towards the worst settings."""
    if mode not in ("min", "max"):
        raise ConfigError(f"optimized_mode must be min or max, got {excerpt(repr(mode))}")
    if metric is not None and mode != (better := monitor_mode(metric)):
        raise ConfigError(
            f"optimized_mode={mode} would keep the worst {excerpt(str(metric))} as best: it is better "
            f"{'higher' if better == 'max' else 'lower'}; set optimized_mode={better}, or leave it out "
            "(it follows optimized_metric)"
        )
    return mode


def register_monitor_resolvers() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("swwae.default_monitor"):
        OmegaConf.register_new_resolver(
            "swwae.default_monitor", lambda *, _root_: default_monitor(_root_.model, _root_.data)
        )
    if not OmegaConf.has_resolver("swwae.monitor_mode"):
        OmegaConf.register_new_resolver("swwae.monitor_mode", monitor_mode)


register_monitor_resolvers()
