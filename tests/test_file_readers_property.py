"""Every file reader, fed random JSON-like values: it loads, or says in one line why not (a
``swwae.errors.UserError`` without a newline), and what it loads is usable by the code that
reads it next. Never another exception."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from swwae.checkpoint_file import POSITION_KEY, verified
from swwae.commands.runs import run_row
from swwae.errors import Unreadable, UserError
from swwae.pretrained import read_config
from swwae.stored import parse_metrics, parse_network_settings, parse_overrides, parse_stored_config
from swwae.training.runs.folder import IDENTITY_KEYS, describe_checkpoint, identity_of, mid_epoch_position
from swwae.training.sweep.jobs import read_job

KEYS = [
    *("model", "data", "trainer", "paths", "logger", "callbacks", "seed", "run_name", "_target_", "optimized_metric"),
    *("max_epochs", "max_steps", "output_dir", "checkpoint_dir", "root", "download", "batch_size"),
    *("metrics", "status", "error", "checkpoint", "checkpoint_sha256", "monitor", "metric", "mode", "val/acc"),
    *("image_shape", "num_classes", "pixel_mean", "widths", "run_config", "swwae", "format"),
    *("state_dict", "hyper_parameters", "swwae_config", "epoch", "global_step", "batches_done", POSITION_KEY),
]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_subnormal=False)  # the job flushes denormals process-wide (flush_denormal)
    | st.text(max_size=12)
    | st.sampled_from(["swwae.training.data.MNISTSampleDataModule", "swwae.training.module.SWWAEModule", "a" * 64])
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner),
    max_leaves=24,
)
MAPPINGS = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=8)
ANY = VALUES | MAPPINGS
pytestmark = pytest.mark.slow  # a few seconds each: hypothesis draws many files
# the same files each run, as every property test's (the suite's profile, conftest.py); fresh
# ones with pytest --hypothesis-profile search
SETTINGS = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def loads_or_one_line(read, value):
    """``read(value)``, or None where it raised a one-line UserError; anything else fails."""
    try:
        return read(value)
    except UserError as err:
        assert "\n" not in str(err) and str(err), repr(err)
        return None


@SETTINGS
@given(ANY)
def test_a_stored_config(value):
    config = loads_or_one_line(lambda v: parse_stored_config(v, "checkpoint x.ckpt"), value)
    if config is not None:
        identity_of(*(config.get(k) for k in IDENTITY_KEYS))  # what resume compares (RunFolder.read)


@SETTINGS
@given(ANY)
def test_network_settings(value):
    loads_or_one_line(lambda v: parse_network_settings(v, "checkpoint x.ckpt"), value)


@SETTINGS
@given(ANY)
def test_overrides(value):
    overrides = loads_or_one_line(lambda v: parse_overrides(v, "sweep file o.yaml"), value)
    assert overrides is None or all(isinstance(k, str) and isinstance(v, str) for k, v in overrides.items())


@SETTINGS
@given(ANY)
def test_a_metrics_json(value):
    record = loads_or_one_line(lambda v: parse_metrics(v, "metrics.json m"), value)
    assert record is None or all(isinstance(v, float) for v in record["metrics"].values())


@SETTINGS
@given(MAPPINGS, ANY, ANY)
def test_a_checkpoint(value, state_dict, hyper_parameters):
    value = {"state_dict": state_dict, "hyper_parameters": hyper_parameters, "swwae_config": {}} | value
    if isinstance(value["state_dict"], dict):  # tensors too, as a checkpoint holds them
        value["state_dict"] = {str(k): torch.zeros(1) for k in value["state_dict"]}
    checkpoint = loads_or_one_line(lambda v: verified(v, "x.ckpt"), value)
    if checkpoint is not None:  # what resume and `swwae runs` read of it
        identity_of(*(checkpoint["swwae_config"].get(k) for k in IDENTITY_KEYS))
        mid_epoch_position(checkpoint)
        describe_checkpoint(Path("x.ckpt"), checkpoint)
        run_row("r", Path("."), Path("x.ckpt"), checkpoint)


@settings(SETTINGS, max_examples=30)  # files on disk: slower
@given(ANY)
def test_a_model_folder_config(value):
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(value))
        loads_or_one_line(read_config, Path(folder))


@settings(SETTINGS, max_examples=30)  # files on disk: slower
@given(ANY, ANY)
@example({"status": None}, None)  # found by CI: a status of null made a failed job with no error
@example({"status": "killed", "metrics": {"val/acc": 0.5}}, None)
def test_a_sweep_job(record, overrides):
    with tempfile.TemporaryDirectory() as folder:
        job = Path(folder) / "0_job"
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
        (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(record))
        (job / "metrics.json").write_text(json.dumps(record))
        job = read_job(job)  # never raises: a bad file makes a failed job that says why
        assert job.ok or "\n" not in job.record["error"]
        assert all(math.isnan(v) or isinstance(v, float) for v in job.metrics.values())
        try:
            job.monitor, job.seed, job.checkpoint()  # what the table and the figures read
        except Unreadable as err:  # a checkpoint it may not read: one line
            assert "\n" not in str(err)
