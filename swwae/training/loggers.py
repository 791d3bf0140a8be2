"""Experiment trackers (``configs/logger/``): Lightning's own loggers, and the one code path
that hands each of them what the training job logs beyond Lightning's scalars.

* ``check_extras(cfg)``: a logger whose package is an optional extra (mlflow, wandb) and is
  not installed stops the run before any training, with one line naming the pip command.
* ``log_image(logger, name, image, step)``: a panel of ``swwae.images`` (a ``Picture``,
  converted once for all loggers) to any logger that takes images (TensorBoard, MLflow,
  W&B, or any logger with Lightning's ``log_image``); CSV takes none.
* ``log_config(logger, params)``: the run config (``run_params``), at the start of a run:
  MLflow params, W&B config, the ``hparams.yaml`` of CSV and TensorBoard. (The training job
  turns off Lightning's own logging of the module's and datamodule's arguments, which would
  give every model setting twice, flat and as ``model/...``.)
* ``log_summary(logger, params, metrics, step)``: at the end of a run, the final metrics as
  ``hp/<metric>``: TensorBoard's hparams table (with ``params``), MLflow metrics, W&B
  history and summary, a row of the CSV file.

The OmegaConf resolver ``${swwae.wandb_offline:}`` (``configs/logger/wandb.yaml``) keeps W&B
offline unless the user chose a mode (``WANDB_MODE``) or logged in (``WANDB_API_KEY``, or
the ``wandb login`` entry in ``~/.netrc``).
"""

from __future__ import annotations

import importlib
import netrc
import os
from urllib.parse import urlparse

from lightning.pytorch.loggers import Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from swwae.errors import ConfigError
from swwae.images import Picture

# logger class -> (the package it needs, the extra of pyproject.toml that installs it)
EXTRAS = {"MLFlowLogger": ("mlflow", "mlflow"), "WandbLogger": ("wandb", "wandb")}

# helpers


def check_extras(cfg: DictConfig) -> None:
    """ConfigError (one line, before any training) for each configured logger whose package
    is missing: ``logger=mlflow needs mlflow: pip install -e ".[mlflow]"``."""
    for key, node in (cfg.get("logger") or {}).items():
        target = str((node or {}).get("_target_", "")) if OmegaConf.is_dict(node) or isinstance(node, dict) else ""
        needs = EXTRAS.get(target.rsplit(".", 1)[-1])
        if needs is None:
            continue
        package, extra = needs
        try:
            importlib.import_module(package)
        except ImportError:
            raise ConfigError(f'logger={key} needs {package}: pip install -e ".[{extra}]"') from None


def wandb_offline() -> bool:
    """W&B runs offline unless ``WANDB_MODE`` is set (W&B then reads it itself) or an API key
    is at hand (``WANDB_API_KEY``, or ``wandb login``'s entry in ``~/.netrc`` or ``$NETRC``)."""
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return False
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC") or None).authenticators(host) is None
    except (OSError, netrc.NetrcParseError):
        return True


def mlflow_key(name: str) -> str:
    """MLflow image keys: ``where/stage_1`` -> ``where_stage_1`` (a slash in a key made the
    image undownloadable in some MLflow versions)."""
    return name.replace("/", "_")


def takes_images(logger: Logger) -> bool:
    return isinstance(logger, (TensorBoardLogger, MLFlowLogger)) or callable(getattr(logger, "log_image", None))


def _tensorboard_image(writer, name: str, picture: Picture, step: int) -> None:
    """Hand TensorBoard the picture's PNG. ``add_image`` would convert the pixels to float and
    back and encode them again at zlib's default level, three times the work."""
    from torch.utils.tensorboard import SummaryWriter

    if not (isinstance(writer, SummaryWriter) and hasattr(writer, "_get_file_writer")):  # tensorboardX: own protobufs
        writer.add_image(name, picture.pixels, global_step=step, dataformats="HW" if picture.channels == 1 else "HWC")
        return
    from tensorboard.compat.proto.summary_pb2 import Summary

    height, width = picture.pixels.shape[:2]
    image = Summary.Image(height=height, width=width, colorspace=picture.channels, encoded_image_string=picture.png)
    # what add_image itself does with the summary it builds
    writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=name, image=image)]), step)


def _final(metrics: dict[str, float]) -> dict[str, float]:
    return {f"hp/{k}": float(v) for k, v in metrics.items()}


# logging


def log_image(logger: Logger, name: str, image: Tensor | Picture, step: int) -> bool:
    """Log ``image`` (a ``Picture``, or a (3, H, W) tensor in [0, 1]) as ``name`` at ``step``
    (the epoch) to ``logger``; False for a logger that takes no images (CSV). W&B places it
    at the trainer's global step (its x-axis for everything Lightning logs)."""
    picture = image if isinstance(image, Picture) else Picture(image)
    if isinstance(logger, TensorBoardLogger):
        _tensorboard_image(logger.experiment, name, picture, step)
    elif isinstance(logger, MLFlowLogger):
        logger.experiment.log_image(logger.run_id, picture.pil, key=mlflow_key(name), step=step)
    elif isinstance(logger, WandbLogger):
        logger.log_image(key=name, images=[picture.pil])
    elif callable(getattr(logger, "log_image", None)):  # Lightning's signature: (key, images, step)
        logger.log_image(key=name, images=[picture.pil], step=step)
    else:
        return False
    return True


def log_config(logger: Logger, params: dict) -> None:
    """The run config at the start of a run."""
    if isinstance(logger, MLFlowLogger):  # params cannot change once logged: add only new keys
        from lightning.fabric.utilities.logger import _convert_params, _flatten_dict

        held = logger.experiment.get_run(logger.run_id).data.params
        params = {k: v for k, v in _flatten_dict(_convert_params(params)).items() if k not in held}
        if not params:
            return
    logger.log_hyperparams(params)


def log_summary(logger: Logger, params: dict, metrics: dict[str, float], step: int) -> None:
    """The final metrics, as ``hp/<metric>``; TensorBoard's hparams table pairs them with
    ``params`` (the other loggers got the whole run config from ``log_config``)."""
    if isinstance(logger, TensorBoardLogger):  # the hparams table
        logger.log_hyperparams(params, metrics=_final(metrics))
        logger.experiment.flush()
        return
    logger.log_metrics(_final(metrics), step=step)
    logger.save()


def run_params(config: dict, arch: str | None = None, choices: dict | None = None) -> dict:
    """The run config as tracker params: the top-level settings (``seed``, ``run_name``,
    ...), the model, data and trainer groups (``model/lr``, ``data/batch_size``,
    ``trainer/max_epochs``, ...; ``model/arch`` is the network trained, in the paper's
    notation) and the config chosen in each group (``choice/model``: ``swwae_hard``, ...)."""
    params = {k: v for k, v in config.items() if not isinstance(v, (dict, list))}
    for group in ("model", "data", "trainer"):
        params[group] = {k: v for k, v in (config.get(group) or {}).items() if k != "_target_"}
    if arch is not None:
        params["model"]["arch"] = arch
    chosen = {
        k: v if isinstance(v, str) else str(list(v))
        for k, v in (choices or {}).items()
        if k in ("model", "data", "trainer", "logger", "experiment") and v is not None
    }
    if chosen:
        params["choice"] = chosen
    return params


def _register() -> None:
    if not OmegaConf.has_resolver("swwae.wandb_offline"):
        OmegaConf.register_new_resolver("swwae.wandb_offline", wandb_offline)


_register()
