"""Semi-supervised training: labelled samples in every batch, a checkpoint monitor that
follows what the model trains, and the bad values that cannot work."""

from __future__ import annotations

import json
import math
from collections import Counter

import lightning as L
import pytest
import torch

from helpers.config import MODEL_CONFIGS
from helpers.faults import Crash, crash_at
from helpers.steps import WITHOUT_A_TRAINER, quiet_trainer
from swwae.errors import ConfigError
from swwae.training.data import MNISTSampleDataModule
from swwae.training.data.batching import UNLABELLED, LabelledBatchSampler, SemiSupervisedBatch, batch_loader
from swwae.training.run import train

N, BATCH, K = 1000, 64, 16  # 1000 training samples, 16 labelled in every batch of 64


def sampler(labelled=range(0, N, 10), seed=0, k=K):
    return LabelledBatchSampler(N, torch.tensor(list(labelled)), BATCH, k, seed)


def epoch(s: LabelledBatchSampler, e: int) -> list[SemiSupervisedBatch]:
    s.set_epoch(e)
    return list(s)


# batch composition


def test_every_batch_holds_exactly_k_labelled_and_an_epoch_passes_over_every_sample_once():
    s = sampler()
    batches = epoch(s, 0)
    assert len(batches) == len(s) == math.ceil(N / (BATCH - K))
    assert all(len(b.labelled) == K for b in batches)
    assert all(len(b.unlabelled) == BATCH - K for b in batches[:-1]) and 0 < len(batches[-1].unlabelled) <= BATCH - K
    assert sorted(i for b in batches for i in b.unlabelled) == list(range(N))
    assert {i for b in batches for i in b.labelled} <= set(range(0, N, 10))


def test_the_loader_hides_the_labels_of_the_unlabelled_part():
    x, y = torch.arange(N, dtype=torch.float32).view(N, 1, 1, 1), torch.arange(N) % 10
    for bx, by in batch_loader(x, y, BATCH, shuffle=True, sampler=sampler()):
        assert (by[:K] >= 0).all() and (by[K:] == UNLABELLED).all()
        assert torch.equal(by[:K], bx[:K].flatten().long() % 10)  # the labels are the images' own


def test_every_label_is_used_equally_often_in_each_cycle():
    labelled = list(range(5, N, 37))  # 27 labelled samples: cycles do not align with batches
    s = sampler(labelled)
    stream = s.labelled_stream(0, 10 * len(labelled)).tolist()
    for c in range(10):
        assert sorted(stream[c * len(labelled) : (c + 1) * len(labelled)]) == labelled
    assert stream[: len(labelled)] != stream[len(labelled) : 2 * len(labelled)]  # reshuffled per cycle
    # the epochs read the same stream, one after the other
    drawn = [i for e in range(4) for b in epoch(s, e) for i in b.labelled]
    assert drawn == s.labelled_stream(0, len(drawn)).tolist()
    counts = Counter(drawn[: len(drawn) // len(labelled) * len(labelled)])
    assert set(counts) == set(labelled) and len(set(counts.values())) == 1


def test_batches_are_a_pure_function_of_seed_and_epoch():
    fresh = epoch(sampler(seed=1), 3)
    used = sampler(seed=1)
    for e in (0, 1, 2, 5):
        epoch(used, e)
    assert epoch(used, 3) == fresh  # whatever ran before: what a resumed run relies on
    assert epoch(sampler(seed=1), 4) != fresh and epoch(sampler(seed=2), 3) != fresh
    again = sampler(seed=1)
    assert list(again) != list(again)  # without set_epoch the next pass moves on


def test_ddp_ranks_get_their_own_batches():
    x, y = torch.zeros(N, 1, 1, 1), torch.arange(N) % 10
    per_rank = []
    for rank in range(2):  # 18 batches: 9 a rank
        loader = batch_loader(x, y, BATCH, shuffle=True, sampler=sampler(k=8), ranks=(rank, 2))
        loader.sampler.set_epoch(2)
        per_rank.append(list(loader.sampler))
    assert [len(b) for b in per_rank] == [9, 9]
    hidden = [[i for b in batches for i in b.unlabelled] for batches in per_rank]
    assert not set(hidden[0]) & set(hidden[1]) and sorted(hidden[0] + hidden[1]) == list(range(N))
    labelled = [[i for b in batches for i in b.labelled] for batches in per_rank]
    assert all(len(b.labelled) == 8 for batches in per_rank for b in batches)
    assert labelled[0] != labelled[1]


# the datamodule


def test_the_datamodule_serves_labelled_batches_only_when_num_labels_is_set():
    dm = MNISTSampleDataModule(num_labels=100, labelled_per_batch=20, batch_size=100)
    dm.setup()
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (100, 1, 28, 28) and int((y >= 0).sum()) == 20 and (y[20:] == UNLABELLED).all()
    assert len(dm.train_dataloader()) == math.ceil(4000 / 80)
    assert sorted(dm.labelled.tolist()) == torch.nonzero(dm.train_y >= 0).flatten().tolist()
    full = MNISTSampleDataModule(batch_size=100)
    full.setup()
    assert len(full.train_dataloader()) == 40 and (next(iter(full.train_dataloader()))[1] >= 0).all()


def test_the_default_is_a_quarter_of_the_batch_and_never_more_than_the_labels():
    assert MNISTSampleDataModule(num_labels=100, batch_size=128).labelled_per_batch == 32
    assert MNISTSampleDataModule(num_labels=10, batch_size=128).labelled_per_batch == 10
    assert MNISTSampleDataModule(num_labels=100, batch_size=2).labelled_per_batch == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"labelled_per_batch": 0}, r"data.labelled_per_batch=0 is not allowed: must be >= 1"),
        (
            {"labelled_per_batch": 128},
            r"labelled_per_batch=128 leaves no room for unlabelled samples in batches of "
            r"data.batch_size=128",
        ),
        ({"labelled_per_batch": 101}, r"labelled_per_batch=101 is more than the data.num_labels=100 labelled samples"),
        ({"batch_size": 1}, r"^data.batch_size=1 leaves no room for unlabelled samples .*: make it 2 or more$"),
    ],
)
def test_labelled_per_batch_values_that_cannot_work(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        MNISTSampleDataModule(**{"num_labels": 100, "batch_size": 128} | kwargs)


# the checkpoint monitor


@pytest.mark.parametrize("model", MODEL_CONFIGS)
@pytest.mark.parametrize("num_labels", [None, 100])
@pytest.mark.slow
def test_the_default_monitor_is_a_metric_the_model_trains(make_config, model, num_labels):
    cfg = make_config(f"model={model}", f"data.num_labels={'null' if num_labels is None else num_labels}")
    trains_reconstruction = cfg.model.lambda_rec > 0 or cfg.model.lambda_m > 0
    expected = "val/acc" if num_labels or not trains_reconstruction else "val/recon_mse"
    assert (cfg.optimized_metric, cfg.optimized_mode) == (expected, "max" if expected == "val/acc" else "min")


def test_the_default_monitor_of_a_model_without_a_classifier_is_its_reconstruction(make_config):
    cfg = make_config("model.lambda_nll=0", "data.num_labels=100")
    assert (cfg.optimized_metric, cfg.optimized_mode) == ("val/recon_mse", "min")


def test_a_loss_weight_a_model_config_leaves_out_is_its_default_for_the_head_and_the_monitor():
    """The loss weighs lambda_nll and lambda_rec 1 where a flat model config leaves them out: the
    network gets its head, and the monitor follows what it trains."""
    from swwae.model import SWWAE
    from swwae.training.composing import default_monitor

    assert SWWAE.from_settings({"widths": [4]}, (1, 28, 28)).classifier is not None
    assert default_monitor({"widths": [4]}, {"num_labels": 100}) == "val/acc"
    assert default_monitor({"widths": [4], "lambda_nll": 1.0}, {}) == "val/recon_mse"
    assert default_monitor({"widths": [4], "lambda_rec": 0.0, "lambda_m": 0.0}, {}) == "val/acc"


def test_stl10_with_its_unlabelled_images_is_semi_supervised_too(make_config):
    assert make_config("data=stl10").optimized_metric == "val/acc"
    assert make_config("data=stl10", "data.unlabelled=false").optimized_metric == "val/recon_mse"


def test_an_explicit_monitor_wins_and_its_mode_follows(make_config):
    cfg = make_config("model=classifier_only", "optimized_metric=val/loss")
    assert (cfg.optimized_metric, cfg.optimized_mode) == ("val/loss", "min")
    cfg = make_config("optimized_metric=val/acc")
    assert (cfg.optimized_metric, cfg.optimized_mode) == ("val/acc", "max")


def test_a_monitor_the_model_cannot_compute_is_one_error_line(make_config, tmp_path):
    with pytest.raises(
        ConfigError,
        match="optimized_metric=val/acc is not a validation metric of this model; "
        "choose one of val/loss, val/recon_mse$",
    ):
        train(make_config("model.lambda_nll=0", "optimized_metric=val/acc", "model.widths=[4]"))
    assert not (tmp_path / "checkpoints").exists()


# a real run


class RecordTrainingSteps(L.Callback):
    """Test probe: per training step, the labelled samples in the batch and the NLL term
    the loss was made of."""

    def __init__(self):
        self.labelled, self.nll = [], []

    def on_fit_start(self, trainer, module):
        losses = module.losses

        def recording(out, x, y, middle_targets=None):
            terms = losses(out, x, y, middle_targets)
            if module.training:
                self.nll.append(float(terms["nll"]))
            return terms

        module.losses = recording

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.labelled.append(int((batch[1] >= 0).sum()))


@pytest.mark.slow
def test_a_semi_supervised_run_computes_the_nll_on_every_step_and_picks_by_val_acc(make_config, tmp_path):
    cfg = make_config(
        "data.num_labels=50",
        "data.labelled_per_batch=8",
        "model.widths=[4]",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=5",
    )
    probe = RecordTrainingSteps()
    with pytest.MonkeyPatch.context() as mp:  # the job builds its callbacks from the config: add the probe
        from helpers.faults import with_callback

        with_callback(mp, probe)
        value = train(cfg)
    assert probe.labelled == [8] * 10
    assert len(probe.nll) == 10 and all(math.isfinite(v) and v > 0 for v in probe.nll)
    summary = json.loads((tmp_path / "output" / "metrics.json").read_text())
    assert summary["monitor"] == {"metric": "val/acc", "mode": "max"}
    assert value == summary["metrics"]["val/acc"]


@pytest.mark.slow
def test_a_resumed_semi_supervised_run_matches_an_uninterrupted_one(make_config, tmp_path):
    common = [
        "data.num_labels=50",
        "data.labelled_per_batch=8",
        "model.widths=[4]",
        "model.dropout=0.2",
        "model.scheduler=none",
        "trainer.deterministic=true",
        "trainer.limit_train_batches=4",
        "seed=5",
    ]
    train(make_config(*common, "trainer.max_epochs=2", f"paths.checkpoint_dir={tmp_path / 'straight'}"))
    stopped = [*common, "trainer.max_epochs=2", f"paths.checkpoint_dir={tmp_path / 'stopped'}"]
    with pytest.raises(Crash):  # at the start of the second epoch
        train(make_config(*stopped, *crash_at(epoch=1)))
    train(make_config(*stopped, "resume=true"))
    run = "swwae_hard_mnist_sample_labels50_seed5"
    straight, resumed = (
        torch.load(tmp_path / d / run / "last.ckpt", weights_only=True) for d in ("straight", "stopped")
    )
    assert straight["global_step"] == resumed["global_step"] == 8
    assert all(torch.equal(straight["state_dict"][k], v) for k, v in resumed["state_dict"].items())


# denoising


@WITHOUT_A_TRAINER
def test_noisy_inputs_are_reconstructed_into_the_clean_images_and_clean_features():
    from swwae.training.module import SWWAEModule

    torch.manual_seed(0)
    module = SWWAEModule(widths=[4, 8], dropout=0.5, input_noise=0.5, clean_middle_targets=True).train()
    x, y = torch.rand(6, 1, 28, 28), torch.full((6,), UNLABELLED)
    seen = {}
    losses = module.losses
    module.losses = lambda out, target, labels, middle: (
        seen.update(out=out, target=target, middle=middle) or losses(out, target, labels, middle)
    )
    module.training_step((x, y), 0)
    assert torch.equal(seen["target"], x)  # the clean images, not the noisy inputs
    with torch.no_grad():
        module.eval()
        clean = module.net.encode(x)[0][0]  # no noise, no dropout
    assert torch.equal(seen["middle"][0], clean) and not seen["middle"][0].requires_grad
    assert not torch.equal(seen["out"].whats[0].detach(), clean)  # the training pass saw noise


def test_the_nll_warmup_counts_epochs_in_optimiser_steps_under_gradient_accumulation():
    """Accumulating 2 batches a step, a warm-up of one epoch reaches full weight at the epoch's
    last step (counted in batches, it stood at half weight there)."""
    from swwae.training.module import SWWAEModule

    torch.manual_seed(0)
    data = MNISTSampleDataModule(batch_size=32, num_labels=100, labelled_per_batch=8)
    module = SWWAEModule(widths=[4], lambda_nll=1.0, nll_warmup_epochs=1.0)
    weights, losses = [], module.losses

    def recording(*args):
        weights.append(module.nll_weight())
        return losses(*args)

    module.losses = recording
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=4, limit_val_batches=0, accumulate_grad_batches=2)
    trainer.fit(module, data)
    assert weights == pytest.approx([0.5, 0.5, 1.0, 1.0])
