"""A device asked for and not there: one line naming what was asked and what the machine has
(``swwae.training.trainer_settings.check_devices``), exit 2 before any data is read."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from helpers.cli import last_error_line, train_here
from swwae.errors import ConfigError
from swwae.training import trainer_settings as devices
from swwae.training.trainer_settings import check_devices


@pytest.fixture
def gpus(monkeypatch):
    """``gpus(n)``: torch sees n CUDA GPUs (0: none, as on a CPU machine)."""

    def have(n: int):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)

    return have


@pytest.fixture
def cpus(monkeypatch):
    """``cpus(n)``: this process may run on n CPUs."""
    return lambda n: monkeypatch.setattr(devices, "affinity_cpus", lambda: n)


@pytest.fixture
def off_a_cluster(monkeypatch):
    """No variable of a cluster's (SLURM, torchrun, ...) or of a machine started by hand."""
    for name in devices.CLUSTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def trainer(**settings):
    return OmegaConf.create(settings)  # the job passes cfg.trainer, a DictConfig


def error_of(cfg) -> str:
    with pytest.raises(ConfigError) as err:
        check_devices(cfg)
    return str(err.value)


def test_a_gpu_asked_for_on_a_machine_without_one_names_both(gpus):
    gpus(0)
    for accelerator in ("gpu", "cuda", "GPU"):
        line = error_of(trainer(accelerator=accelerator, devices=1))
        assert "asks for a CUDA GPU" in line and "has none" in line and "trainer=default" in line


def test_more_gpus_than_there_are_names_both_counts(gpus):
    gpus(1)
    line = error_of(trainer(accelerator="gpu", devices=4))
    assert "trainer.devices=4 asks for 4 CUDA GPUs, and this machine has 1" in line
    assert "trainer.devices=1" in line
    gpus(2)
    assert "asks for 3 CUDA GPUs, and this machine has 2" in error_of(trainer(accelerator="cuda", devices="3"))


def test_gpu_indices_that_are_not_there_are_named(gpus):
    gpus(2)
    assert "names GPU 2" in error_of(trainer(accelerator="gpu", devices=[0, 2]))
    assert "names GPU 3" in error_of(trainer(accelerator="gpu", devices="1,3"))
    check_devices(trainer(accelerator="gpu", devices=[0, 1]))
    check_devices(trainer(accelerator="gpu", devices="0,1"))


def test_what_the_machine_has_passes(gpus, cpus, off_a_cluster):
    gpus(2)
    for n in (1, 2, -1, "auto", "2"):
        check_devices(trainer(accelerator="gpu", devices=n))
    gpus(0)
    cpus(4)
    check_devices(trainer(accelerator="cpu", devices=1))
    check_devices(trainer(accelerator="cpu", devices=4))  # several CPU processes: Lightning's to run
    check_devices(trainer(accelerator="auto", devices=2))  # trainer=ddp: auto takes what there is
    check_devices(trainer())  # no accelerator named: auto


def test_mps_off_macos_says_what_there_is_instead(gpus, monkeypatch):
    monkeypatch.setattr(devices, "mps_available", lambda: False)
    gpus(0)
    line = error_of(trainer(accelerator="mps", devices=1))
    assert "asks for Apple's MPS GPU, and this machine has none" in line and "trainer=default" in line
    gpus(1)
    assert "trainer=gpu (this machine has 1 CUDA GPU)" in error_of(trainer(accelerator="mps"))
    monkeypatch.setattr(devices, "mps_available", lambda: True)
    check_devices(trainer(accelerator="mps", devices=1))


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a GPU: trainer=gpu is there")
def test_train_on_a_gpu_without_one_is_one_line_before_the_data(tmp_path):
    result = train_here(
        tmp_path, "trainer=gpu", "data=mnist", f"data.root={tmp_path / 'nowhere'}", "data.download=false"
    )
    assert result.returncode == 2, result.stderr
    line = last_error_line(result)
    assert line.startswith("error: trainer.accelerator=gpu asks for a CUDA GPU, and this machine has none"), line
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # the data (missing here) is never read


def test_more_cpu_processes_than_cpus_names_both_counts(gpus, cpus, off_a_cluster, monkeypatch):
    """64 CPU processes on 2 CPUs were killed for memory without a word (exit status 137)."""
    gpus(0)
    cpus(2)
    for accelerator in ("cpu", "auto"):  # trainer=ddp's auto, on a machine without a GPU
        line = error_of(trainer(accelerator=accelerator, devices=64))
        assert line.startswith("trainer.devices=64 asks for 64 CPU processes, and this process may run on 2 CPUs")
        assert line.endswith("give trainer.devices=2 or fewer")
    check_devices(trainer(accelerator="cpu", devices="2"))
    with monkeypatch.context() as env:  # a SLURM task (CPU DDP, one task a process): its CPUs are the task's
        env.setenv("SLURM_NTASKS", "4")
        check_devices(trainer(accelerator="cpu", devices=4))
    gpus(8)
    check_devices(trainer(accelerator="auto", devices=8))  # auto takes the GPUs


def test_a_cpu_run_takes_a_number_of_processes(gpus, cpus, off_a_cluster):
    gpus(0)
    cpus(2)
    for wrong in (0, -1, "abc", [0, 1], True):  # Lightning's words were "should be an int > 0", after the data
        line = error_of(trainer(accelerator="cpu", devices=wrong))
        assert "on the CPU: there it is a number of processes, 1 or more" in line, line
    assert "trainer.devices=-1 on the CPU" in error_of(trainer(accelerator="auto", devices=-1))
    gpus(2)
    check_devices(trainer(accelerator="auto", devices=-1))  # every GPU


def test_several_machines_where_nothing_started_this_process_as_one_is_one_line(off_a_cluster, monkeypatch):
    """num_nodes=2 on one machine: its processes waited for the other machine's forever, and
    SIGTERM did not end them."""
    line = error_of(trainer(accelerator="cpu", devices=1, num_nodes=2))
    assert line.startswith("trainer.num_nodes=2 asks for 2 machines, and nothing started this process as one of them")
    assert "on one machine leave trainer.num_nodes=1" in line
    for name, value in (("SLURM_NTASKS", "4"), ("TORCHELASTIC_RUN_ID", "x"), ("NODE_RANK", "1")):
        with monkeypatch.context() as env:
            env.setenv(name, value)
            check_devices(trainer(accelerator="cpu", devices=1, num_nodes=2))
    check_devices(trainer(accelerator="cpu", devices=1, num_nodes=1))
