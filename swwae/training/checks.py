"""The job's checks of a config, in plain Python: bad input answers before torch or Lightning
is imported (``train.py`` runs them first), with the same one line the deeper checks give,
since they are the same functions (``swwae.settings``, ``swwae.arch``, the run name, the resume
mode, the devices). A config these pass can still fail later (a missing data set, a logger
whose package is not installed), in one line too."""

from __future__ import annotations

from collections.abc import Mapping

from swwae.arch import check_fits
from swwae.errors import ConfigError
from swwae.settings import check_data, check_network, check_training, network_spec, trains_classifier
from swwae.training.devices import check_devices
from swwae.training.registry import DATASETS, MODELS
from swwae.training.runs.decision import resume_mode
from swwae.training.runs.names import check_run_name

NETWORK_KEYS = ("kernel_size", "pool_mode", "beta", "nonlinearity", "dropout")
TRAINING_KEYS = ("lambda_rec", "lambda_m", "lambda_nll", "input_noise", "nll_warmup_epochs", "lr", "scheduler")
DATA_KEYS = ("batch_size", "num_labels", "seed", "num_workers", "split_seed", "labelled_per_batch", "num_unlabelled")


def check_seed(seed) -> None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32):
        raise ConfigError(f"seed must be an integer in 0..{2**32 - 1} (or null), got {seed!r}")


def check_length(trainer: Mapping) -> None:
    """A run that trains nothing would test an untrained model and report it as a result."""
    for key in ("max_epochs", "max_steps"):
        if trainer.get(key) == 0:
            raise ConfigError(
                f"trainer.{key}=0 trains nothing: give it at least 1 (to evaluate a checkpoint "
                f"without training, use python scripts/evaluate.py <checkpoint>)"
            )


def check_settings(cfg: Mapping) -> None:
    """The run's own settings: its name, seed, resume mode, length and devices."""
    check_run_name(cfg.get("run_name"))
    check_seed(cfg.get("seed"))
    resume_mode(cfg.get("resume", "auto"))
    check_length(cfg["trainer"])
    check_devices(cfg["trainer"])  # a GPU asked for and not there: one line, before the data


def check_model_and_data(model: Mapping, data: Mapping) -> None:
    """A shipped data set's settings, and a shipped model's network on its images, as their
    classes will check them; a class of the user's own checks itself when it is built."""
    spec = DATASETS.get(str(data.get("_target_", "")).rpartition(".")[2])
    if spec is None:
        return
    check_data(
        spec.name,
        spec.num_classes,
        **{k: data[k] for k in DATA_KEYS if k in data},
    )
    if str(model.get("_target_", "")).rpartition(".")[2] not in MODELS or any(
        k not in model for k in (*NETWORK_KEYS, *TRAINING_KEYS)
    ):
        return
    check_network(*(model[k] for k in NETWORK_KEYS), spec.image_shape)
    arch = network_spec(
        model.get("arch"),
        model.get("widths"),
        model["kernel_size"],
        model.get("pool_size"),
        spec.num_classes if trains_classifier(model) else None,
    )
    check_fits(
        arch,
        spec.image_shape,
        model.get("pool_stride"),
        model.get("pool_padding") or 0,
        ceil=model["pool_mode"] == "wavelet",
    )
    check_training(*(model[k] for k in TRAINING_KEYS), model.get("arch"))


def check_config(cfg) -> None:
    """Every check that needs neither torch nor Lightning, on a job config (a DictConfig)."""
    from omegaconf import OmegaConf

    check_settings(cfg)
    check_model_and_data(
        OmegaConf.to_container(cfg.model, resolve=True), OmegaConf.to_container(cfg.data, resolve=True)
    )
