"""Experiment trackers (configs/logger/, swwae/training/callbacks.py): CSV, MLflow, W&B (offline), several at once, the
panels to every logger that takes images, a missing extra as one error line."""

from __future__ import annotations

import csv
import math
import re
import shutil
import sys
import threading

import lightning as L
import pytest
import torch
import yaml
from lightning.pytorch.loggers import CSVLogger, Logger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import swwae.training.callbacks
from helpers.cli import command_here
from helpers.config import ROOT
from helpers.faults import Crash, crash_at, with_callback
from swwae.errors import ConfigError
from swwae.install import importable
from swwae.training.callbacks import ReconstructionImages, log_image, wandb_offline
from swwae.training.run import train

RUN = "swwae_hard_mnist_sample_seed0"


def logged_images(folder) -> dict[str, list]:
    """tag -> every image event (step, width, height, PNG bytes) in the TensorBoard event files under ``folder``."""
    images = {}
    for file in folder.rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(file), size_guidance={"images": 0})
        acc.Reload()
        for tag in acc.Tags()["images"]:
            images.setdefault(tag, []).extend(acc.Images(tag))
    return images


@pytest.mark.slow
def test_logger_many_writes_tensorboard_and_a_csv_file_with_the_final_metrics(make_config, tmp_path):
    cfg = make_config("logger=many", "model.widths=[8,16]")
    assert set(cfg.logger) == {"tensorboard", "csv"}
    train(cfg)

    folder = tmp_path / "logs" / "csv" / RUN / "version_0"
    with open(folder / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    columns = set(rows[0])
    assert {"val/recon_mse", "val/acc", "train/loss_epoch", "test/recon_mse", "hp/test/recon_mse"} <= columns
    assert any(row["val/recon_mse"] for row in rows) and any(row["hp/test/recon_mse"] for row in rows)
    params = yaml.safe_load((folder / "hparams.yaml").read_text())  # the run config, not the module's flat args
    assert params["run_name"] == RUN and params["model"]["widths"] == [8, 16]
    assert params["model"]["arch"] == "(8)3c-2p-(16)3c-2p-10fc" and "lr" not in params

    # TensorBoard got the same labelled panels, magnified 3x: 4 digits of 84 pixels a line, labels above
    images = {tag: events[-1] for tag, events in logged_images(tmp_path / "logs" / RUN).items()}
    assert images["reconstructions"].width == 4 * (84 + 2) + 2 and images["reconstructions"].height > 3 * (84 + 2) + 2
    assert images["where/stage_2"].width == 4 * (84 + 2) + 2  # 14-pixel masks shown as 84-pixel images


class StepLosses(L.Callback):
    def __init__(self):
        self.losses = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.losses.append(outputs["loss"].item())


@pytest.mark.slow
def test_each_step_the_loggers_write_carries_its_own_loss_and_the_epoch_its_mean(make_config, monkeypatch, tmp_path):
    """train/loss_step is logged only at the steps the loggers write (Lightning's rule, asked of
    it: swwae.training.module.loggers_write_this_step), train/loss_epoch once an epoch from the
    steps' terms kept on the device: each written value is its own step's loss, none stale or missing."""
    steps = StepLosses()
    with_callback(monkeypatch, steps)
    train(
        make_config(
            "logger=csv",
            "model.widths=[4]",
            "trainer.max_epochs=2",
            "trainer.limit_train_batches=7",
            "trainer.log_every_n_steps=3",
            "trainer.limit_val_batches=1",
            "test=false",
        )
    )
    with open(tmp_path / "logs" / "csv" / RUN / "version_0" / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    logged = [(int(row["step"]), float(row["train/loss_step"])) for row in rows if row["train/loss_step"]]
    assert [step for step, _ in logged] == [2, 5, 8, 11]  # every 3rd of 14 steps
    assert [loss for _, loss in logged] == pytest.approx([steps.losses[i] for i in (2, 5, 8, 11)], rel=1e-6)
    epochs = [float(row["train/loss_epoch"]) for row in rows if row["train/loss_epoch"]]
    assert epochs == pytest.approx([sum(steps.losses[:7]) / 7, sum(steps.losses[7:]) / 7], rel=1e-5)


class CallbacksSeen(L.Callback):
    def on_fit_start(self, trainer, module):
        self.kinds = [type(callback) for callback in trainer.callbacks]


def test_a_logger_or_a_callback_set_to_null_is_switched_off(make_config, monkeypatch, tmp_path):
    """Hydra's way to switch off one node of a section (as ``~logger.tensorboard``): the run goes on
    without it."""
    seen = CallbacksSeen()
    with_callback(monkeypatch, seen)
    train(make_config("logger=many", "logger.tensorboard=null", "callbacks.reconstruction_images=null"))
    assert (tmp_path / "logs" / "csv" / RUN / "version_0" / "metrics.csv").is_file()
    assert not (tmp_path / "logs" / RUN).exists()  # TensorBoard's folder
    assert CallbacksSeen in seen.kinds and ReconstructionImages not in seen.kinds


def test_panels_every_0_epochs_are_never_drawn(make_config, tmp_path):
    train(make_config("callbacks.reconstruction_images.every_n_epochs=0"))
    assert list((tmp_path / "logs" / RUN).rglob("events.out.tfevents.*")) and logged_images(tmp_path / "logs") == {}


def test_panels_painted_in_the_background_are_the_panels_of_every_epoch_written_before_the_run_ends(
    make_config, monkeypatch, tmp_path
):
    """``in_background=true`` (a GPU's default; here forced on the CPU): drawn and written by the
    painter thread, all of them before the run returns, the same PNGs as drawn in the training thread."""
    threads = []

    def spied(*args, **kwargs):
        threads.append((threading.current_thread().name, torch.get_num_threads()))
        return log_image(*args, **kwargs)

    monkeypatch.setattr(swwae.training.callbacks, "log_image", spied)
    runs = {}
    for background, name in (("true", "painter"), ("false", "training_thread")):
        overrides = [f"callbacks.reconstruction_images.in_background={background}", f"run_name={name}"]
        train(make_config(*overrides, "trainer.max_epochs=2", "test=false"))
        runs[name] = {tag: [(e.step, e.encoded_image_string) for e in events]
                      for tag, events in logged_images(tmp_path / "logs" / name).items()}  # fmt: skip
    seen = {(name.split("_")[0], count) for name, count in threads}  # the painter's torch ops on one OpenMP thread
    assert seen == {("swwae-panel-painter", 1), ("MainThread", torch.get_num_threads())}
    assert len(runs["painter"]) == 4  # reconstructions, two where masks, a middle stage
    assert all([step for step, _ in events] == [0, 1] for events in runs["painter"].values())
    assert runs["painter"] == runs["training_thread"]
    assert not any(thread.name.startswith("swwae-panel-painter") for thread in threading.enumerate())


def test_panels_that_fail_in_the_background_fail_the_run_as_in_the_training_thread(make_config, monkeypatch):
    def failing(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(swwae.training.callbacks, "log_image", failing)
    with pytest.raises(OSError, match="No space left on device"):
        train(make_config("callbacks.reconstruction_images.in_background=true", "test=false"))
    assert not any(thread.name.startswith("swwae-panel-painter") for thread in threading.enumerate())


def test_a_run_without_loggers_trains_and_reports(make_config, tmp_path):
    """``~logger``: nothing tracked; Lightning's learning-rate monitor, which refuses to start without
    a logger, is left out."""
    assert math.isfinite(train(make_config("~logger")))
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_a_list_of_loggers_composes(make_config):
    assert set(make_config("logger=[tensorboard,mlflow]").logger) == {"tensorboard", "mlflow"}
    assert set(make_config("logger=[csv,wandb]").logger) == {"csv", "wandb"}
    assert make_config("logger=csv").logger.csv._target_.endswith("CSVLogger")


def test_mlflow_stores_in_the_launch_folder_unless_told_otherwise(make_config, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert make_config("logger=mlflow").logger.mlflow.tracking_uri == "sqlite:///mlflow.db"  # what `mlflow ui` opens
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking:5000")
    assert make_config("logger=mlflow").logger.mlflow.tracking_uri == "http://tracking:5000"


def empty_mlflow_db(request, folder):
    """A new sqlite store in ``folder``: a copy of one made once per MLflow version (MLflow
    builds a store's tables in ~50 migrations, 3-7 s), kept in pytest's cache."""
    import mlflow
    from mlflow import MlflowClient

    path = folder / "mlflow.db"
    cache = getattr(request.config, "cache", None)
    template = cache.mkdir(f"mlflow-{mlflow.__version__}") / "empty.db" if cache is not None else path
    if not template.is_file():
        MlflowClient(f"sqlite:///{template}").search_experiments()  # creates the tables
    if template != path:
        shutil.copyfile(template, path)
    return f"sqlite:///{path}"


@pytest.mark.slow
@pytest.mark.extra("mlflow")
def test_mlflow_run_holds_metrics_params_and_the_panels(make_config, tmp_path, monkeypatch, request):
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)  # artifacts go to ./mlruns beside a sqlite store
    uri = empty_mlflow_db(request, tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    train(make_config("logger=mlflow", "model.widths=[8,16]"))

    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("swwae").experiment_id])
    assert run.info.run_name == RUN and run.info.status == "FINISHED"
    metrics, params = run.data.metrics, run.data.params
    assert {"val/recon_mse", "val/acc", "test/recon_mse", "train/loss_epoch", "hp/test/recon_mse"} <= set(metrics)
    assert metrics["hp/test/recon_mse"] == pytest.approx(metrics["test/recon_mse"])
    assert params["model/widths"] == "[8, 16]" and params["run_name"] == RUN and params["data/batch_size"] == "32"
    assert "widths" not in params  # not Lightning's flat copy of the module's arguments besides
    images = {
        re.split(r"[+%]", p.split("/")[-1])[0]: p  # images/<key>+step+<step>+...png ('%' before MLflow 3.?)
        for p in (a.path for a in client.list_artifacts(run.info.run_id, "images"))
        if p.endswith(".png")
    }
    assert {"reconstructions", "where_stage_1", "where_stage_2", "middle_stage_1"} <= set(images)
    png = images["reconstructions"]
    from PIL import Image

    width, height = Image.open(client.download_artifacts(run.info.run_id, png, str(tmp_path))).size
    assert width == 4 * (84 + 2) + 2 and height > 3 * (84 + 2) + 2


def test_a_missing_extra_is_one_error_before_any_training(make_config, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    with pytest.raises(ConfigError, match=r'^logger=mlflow needs mlflow: pip install -e "\.\[mlflow\]"$'):
        train(make_config("logger=mlflow"))
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "logs").exists()


@pytest.mark.slow
@pytest.mark.skipif(importable("wandb"), reason="wandb is installed")
def test_cli_missing_wandb_is_one_error_line_and_exit_2(tmp_path):
    result = command_here(
        "logger=wandb",
        f"hydra.run.dir={tmp_path}",
        f"paths.log_dir={tmp_path / 'logs'}",
        f"paths.checkpoint_dir={tmp_path / 'ck'}",
        cwd=tmp_path,
    )
    assert result.returncode == 2
    # run outside the clone's folder: the clone's path, not "." (another folder's project, if any)
    assert result.stderr.strip().splitlines()[-1] == f'error: logger=wandb needs wandb: pip install -e "{ROOT}[wandb]"'
    assert "Traceback" not in result.stderr and not (tmp_path / "ck").exists()


def test_wandb_is_offline_unless_the_user_chose_a_mode_or_logged_in(tmp_path, monkeypatch):
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    assert wandb_offline()
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password abc123\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert not wandb_offline()  # `wandb login` wrote it
    (tmp_path / ".netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "abc123")
    assert not wandb_offline()
    monkeypatch.delenv("WANDB_API_KEY")
    monkeypatch.setenv("WANDB_MODE", "online")
    assert not wandb_offline()


def test_log_image_goes_to_any_logger_with_a_log_image_and_skips_csv(tmp_path):
    import torch

    class Tracker(Logger):  # a logger with Lightning's log_image(key, images, step)
        name, version = "tracker", 0
        logged = []

        def log_metrics(self, metrics, step=None): ...

        def log_hyperparams(self, params, *args, **kwargs): ...

        def log_image(self, key, images, step=None, **kwargs):
            self.logged.append((key, images[0].size, step))

    image = torch.rand(3, 20, 30)
    assert log_image(Tracker(), "where/stage_1", image, step=4)  # a tensor, or a Picture
    assert Tracker.logged == [("where/stage_1", (30, 20), 4)]
    assert not log_image(CSVLogger(tmp_path), "reconstructions", image, step=0)


@pytest.mark.parametrize("channels", [1, 3])
def test_tensorboard_shows_the_panel_pixel_for_pixel_at_its_step(tmp_path, channels):
    import io

    import numpy as np
    import torch
    from lightning.pytorch.loggers import TensorBoardLogger
    from PIL import Image

    from swwae.images import Picture

    image = torch.rand(channels, 40, 60, generator=torch.Generator().manual_seed(0)).expand(3, -1, -1).contiguous()
    picture = Picture(image)
    logger = TensorBoardLogger(tmp_path, name="run")
    assert log_image(logger, "middle/stage_1", picture, step=3)
    logger.experiment.flush()
    acc = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents.*"))), size_guidance={"images": 0})
    acc.Reload()
    [event] = acc.Images("middle/stage_1")
    assert (event.step, event.width, event.height) == (3, 60, 40)
    shown = np.asarray(Image.open(io.BytesIO(event.encoded_image_string)))
    assert np.array_equal(shown, picture.pixels) and shown.ndim == (2 if channels == 1 else 3)


@pytest.mark.parametrize(
    "target", ["lightning.pytorch.loggers.TensorBoardLogger", "lightning.pytorch.loggers.tensorboard.TensorBoardLogger"]
)
def test_a_resumed_run_continues_its_newest_tensorboard_version(tmp_path, target):
    """Its curves go on in the same folder, whichever import path the config names the logger by."""
    from omegaconf import OmegaConf

    from swwae.training.composing import build_loggers

    for version in ("version_0", "version_3", "version_x"):
        (tmp_path / RUN / version).mkdir(parents=True)
    node = OmegaConf.create({"tb": {"_target_": target, "save_dir": str(tmp_path), "name": RUN}})
    assert [logger.version for logger in build_loggers(node, resumed={"global_step": 5})] == [3]
    assert [logger.version for logger in build_loggers(node, resumed=None)] == [4]  # a fresh run: a new version


def test_a_resumed_run_writes_on_in_its_csv_file_from_the_step_it_continues(tmp_path):
    """One metrics.csv holds the whole run: not a new version, nor the old file deleted by
    Lightning's writer; rows the interrupted process wrote after its checkpoint go (logged again)."""
    from omegaconf import OmegaConf

    from swwae.training.composing import build_loggers

    folder = tmp_path / RUN / "version_0"
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text("epoch,step,train/loss_step,val/acc\n0,9,2.2,\n1,63,,0.8\n2,69,0.7,\n")
    node = OmegaConf.create({"csv": {"_target_": "lightning.pytorch.loggers.CSVLogger", "save_dir": str(tmp_path)}})
    node.csv.name = RUN
    [logger] = build_loggers(node, resumed={"global_step": 66})
    assert logger.version == 0
    logger.log_metrics({"train/loss_step": 0.6, "lr": 0.001}, step=69)
    logger.save()
    with open(folder / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(row["step"], row["train/loss_step"], row["val/acc"], row["lr"]) for row in rows] == [
        ("9", "2.2", "", ""),
        ("63", "", "0.8", ""),
        ("69", "0.6", "", "0.001"),
    ]


@pytest.mark.extra("mlflow")
def test_a_resumed_run_logs_on_into_the_mlflow_run_its_checkpoint_names(tmp_path, request):
    """Not a second MLflow run of the same name beside the first, left FAILED with half the curves;
    a new run where the store does not hold the checkpoint's (another MLFLOW_TRACKING_URI)."""
    from lightning.pytorch.loggers import MLFlowLogger
    from mlflow import MlflowClient
    from omegaconf import OmegaConf

    from swwae.training.callbacks import TRACKER_RUNS_KEY, tracker_runs
    from swwae.training.composing import build_loggers

    uri = empty_mlflow_db(request, tmp_path)
    first = MLFlowLogger(experiment_name="swwae", run_name=RUN, tracking_uri=uri, artifact_location=str(tmp_path))
    first.log_metrics({"val/acc": 0.5}, step=31)
    first.finalize("failed")  # pre-empted
    checkpoint = {"global_step": 40, TRACKER_RUNS_KEY: tracker_runs([first])}
    node = OmegaConf.create(
        {"mlflow": {"_target_": "lightning.pytorch.loggers.MLFlowLogger", "tracking_uri": uri, "run_name": RUN}}
    )
    [logger] = build_loggers(node, resumed=checkpoint)
    assert logger.run_id == first.run_id
    assert MlflowClient(uri).get_run(first.run_id).info.status == "RUNNING"
    checkpoint[TRACKER_RUNS_KEY] = {"mlflow": "0" * 32}  # not in this store
    [logger] = build_loggers(node, resumed=checkpoint)
    assert logger.run_id not in (first.run_id, "0" * 32)
    for odd in (["x"], {"mlflow": {"a": 1}}, {"mlflow": "../x"}):  # a checkpoint's value is parsed, never trusted
        checkpoint[TRACKER_RUNS_KEY] = odd
        [logger] = build_loggers(node, resumed=checkpoint)
        assert logger.run_id != first.run_id


def test_a_stored_tracker_run_id_is_parsed_never_trusted():
    from swwae.training.callbacks import TRACKER_RUNS_KEY, stored_run_id

    def stored(runs):
        return stored_run_id({TRACKER_RUNS_KEY: runs}, "wandb")

    assert stored({"wandb": "zjhflopm", "mlflow": "x"}) == "zjhflopm"
    assert stored({"wandb": "my-run_2"}) == "my-run_2"  # an id of the user's own
    for odd in (["zjhflopm"], {"wandb": 7}, {"wandb": ""}, {"wandb": "../x"}, {"wandb": "a/b"}, {"wandb": "x" * 65}):
        assert stored(odd) is None
    assert stored_run_id({}, "wandb") is None  # an older swwae's checkpoint


@pytest.mark.slow
@pytest.mark.extra("wandb")
def test_wandb_offline_holds_the_panels_and_a_resumed_run_logs_on_into_the_same_run(make_config, tmp_path, monkeypatch):
    """Offline files under the run's log folder, with the panels; the run resumed continues the W&B run
    its checkpoint names (one run to ``wandb sync``, not a second of the same name with half the curves)."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no `wandb login` of the machine's; W&B's own settings here
    monkeypatch.setenv("WANDB_SILENT", "true")
    import wandb

    overrides = ("logger=wandb", "model.widths=[8]", "trainer.max_epochs=2")
    with pytest.raises(Crash):  # pre-empted in its second epoch
        train(make_config(*overrides, "callbacks.reconstruction_images.every_n_epochs=1", *crash_at(epoch=1)))
    wandb.finish()  # as the process's end would: the resumed run must not just find this one still open
    train(make_config(*overrides, "resume=true"))

    folders = sorted((tmp_path / "logs").rglob("offline-run-*"))
    assert len(folders) == 2 and len({folder.name.rsplit("-", 1)[1] for folder in folders}) == 1
    media = next(folders[0].rglob("media/images"))
    images = {path.relative_to(media).parts[0].split("_")[0] for path in media.rglob("*.png")}
    assert {"reconstructions", "where"} <= images


def test_the_hparams_table_holds_the_data_settings_and_the_model_chosen_not_target(tmp_path):
    """A semi-supervised sweep's rows differ in data.num_labels: the table must show it."""
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.plugins.hparams import plugin_data_pb2

    from swwae.training.callbacks import log_final

    logger = TensorBoardLogger(tmp_path, name=RUN, default_hp_metric=False)
    run_config = {
        "model": {"_target_": "swwae.training.module.SWWAEModule", "lr": 0.002},
        "data": {"_target_": "swwae.training.data.MNISTSample", "num_labels": 100},
    }
    summary = {"model": "swwae_soft", "data": "mnist_sample", "arch": "(4)3c-2p-10fc", "metrics": {"test/acc": 0.5}}
    log_final([logger], run_config, 1, summary, step=10)
    acc = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents.*"))))
    acc.Reload()
    contents = acc.PluginTagToContent("hparams").values()
    [start] = [
        p.session_start_info
        for p in map(plugin_data_pb2.HParamsPluginData.FromString, contents)
        if p.HasField("session_start_info")
    ]
    columns = {
        name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
        for name, value in start.hparams.items()
    }
    assert columns == {
        "lr": 0.002,
        "data/num_labels": 100,
        "seed": 1,
        "model": "swwae_soft",
        "data": "mnist_sample",
        "arch": "(4)3c-2p-10fc",
    }
