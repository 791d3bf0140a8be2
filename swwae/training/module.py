"""LightningModule around the SWWAE: the loss of ``swwae.loss`` with its weights and the
classifier's warm-up, exact metrics, the optimiser, and the guards against non-finite values.
"""

from __future__ import annotations

import functools

import lightning as L
import torch
from torch import nn
from torch.utils.data import DistributedSampler
from torchmetrics import MeanSquaredError
from torchmetrics.classification import MulticlassAccuracy

from swwae.errors import NonFiniteError
from swwae.loss import flat_pair, loss_weights, swwae_loss
from swwae.model import SWWAE, SWWAEOutput, without_dropout
from swwae.optim import adam
from swwae.settings import check_training, model_settings, own_settings, parse
from swwae.stored import plain
from swwae.training.data.batching import EvaluationShare
from swwae.training.nonfinite import LossWatch
from swwae.training.term_means import ImageMean, TermMeans, float32_states
from swwae.training.trainer_settings import steps_an_epoch


def loggers_write_this_step(trainer: L.Trainer | None) -> bool:
    """Whether Lightning's loggers write this training step's values: every ``log_every_n_steps``
    steps, and each step of a ``fast_dev_run``. A ``self.log`` call costs about 0.4 ms of host
    time (2 CPU cores), a GPU's whole step for a small network, and a value logged at other steps
    is overwritten unread. Lightning's own rule, asked of it; every step where a release moved it
    (and without a Trainer, where ``self.log`` says what it does)."""
    if trainer is None:
        return True
    rule = getattr(getattr(trainer, "_logger_connector", None), "should_update_logs", True)
    return bool(trainer.fast_dev_run) or bool(rule)


def processes_meet_after(trainer: L.Trainer, batch_idx: int) -> bool:
    """Whether the end of training batch ``batch_idx`` is one where the host reads the device back
    anyway: every ``log_every_n_steps`` batches and an epoch's last. The loss checks run there, and
    under DDP the processes' other agreements (``swwae.training.preemption``): each is a read
    back, which between those steps would make the host wait for the GPU every step."""
    done = batch_idx + 1
    return done % max(1, trainer.log_every_n_steps) == 0 or done == trainer.num_training_batches


def every_process_sum(trainer: L.Trainer):
    """A tensor summed over the DDP processes (each calls it at the same batch), or None alone:
    ``TermMeans.pop`` and ``totals`` take it."""
    return functools.partial(trainer.strategy.reduce, reduce_op="sum") if trainer.world_size > 1 else None


def reaches_max_steps(trainer: L.Trainer) -> bool:
    """Whether the run's ``trainer.max_steps`` is reached at this training step."""
    return 0 < trainer.max_steps <= trainer.global_step


def float32_pair(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``flat_pair`` in float32 for the evaluation metrics: in a network converted to half precision
    (``bf16-true``) each batch's sum of squared errors was rounded to 8 bits before it reached the
    float32 sums (``float32_states``). A no-op in float32."""
    return tuple(t.float() for t in flat_pair(a, b))


def every_process(t: torch.Tensor) -> list[torch.Tensor]:
    """``t`` of every DDP process (the same shape in each), in rank order: torch.distributed's
    all_gather (Lightning's goes through torch.distributed.nn's, deprecated: a warning a process)."""
    parts = [torch.empty_like(t) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(parts, t.contiguous())
    return parts


def clips_scaled_gradients(trainer: L.Trainer | None) -> bool:
    """Whether ``trainer`` clips gradients (``gradient_clip_val``) under a grad scaler
    (``16-mixed``): Lightning then refuses, at the first step, an optimiser that unscales the
    gradients in its own step, as torch's fused Adam does (``swwae.optim.adam``)."""
    if trainer is None or not trainer.gradient_clip_val:
        return False
    return getattr(trainer.precision_plugin, "scaler", None) is not None


class SWWAEModule(L.LightningModule):
    """Trains an :class:`swwae.model.SWWAE`. ``image_shape``, ``num_classes`` and
    ``pixel_mean`` come from the data; ``settings`` are the model section's, flat
    (``model.beta=10``): the network's, the training's and the loss weights, by the schema of
    ``swwae.settings`` (which holds their defaults and checks them)."""

    def __init__(self, image_shape=(1, 28, 28), num_classes: int = 10, pixel_mean=None, **settings):
        super().__init__()
        values = plain(parse(model_settings(), settings, "model").model_dump())  # the schema's defaults for the rest
        check_training(loss_weights(values), arch=values["arch"])
        data = {"image_shape": plain(image_shape), "num_classes": num_classes, "pixel_mean": plain(pixel_mean)}
        # the settings that made the weights, in checkpoints: the network is rebuilt from them (the
        # schema's defaults for the rest); none of a lab's parts the run does not use (own_settings)
        self.save_hyperparameters(data | own_settings(values))
        self.net = SWWAE.from_settings(values, image_shape, num_classes, pixel_mean)
        self.num_stages = len(self.net.encoders)
        self.metrics = nn.ModuleDict({stage: self._metrics() for stage in ("val", "test")})
        self.loss_watch = LossWatch()
        self.term_means = TermMeans()  # the training terms' epoch means, summed on their device
        self.test_outcomes: list[torch.Tensor] = []  # per test image: label, prediction, recon MSE

    def _metrics(self) -> nn.ModuleDict:
        """Exact dataset means (not means of batch means), one set per evaluation stage."""
        metrics = {"loss": ImageMean(), "recon_mse": MeanSquaredError()}
        metrics |= {f"middle_mse_{i}": MeanSquaredError() for i in range(1, self.num_stages)}
        if self.net.classifier is not None:
            metrics["acc"] = MulticlassAccuracy(self.hparams.num_classes, average="micro")
        return nn.ModuleDict(metrics)

    def _apply(self, fn, *args, **kwargs):
        """As nn.Module's (``.to``, ``.cuda``, ...), the evaluation metrics' sums kept in float32
        whatever dtype the network is converted to (``float32_states``)."""
        module = super()._apply(fn, *args, **kwargs)
        for metric in (m for stage in self.metrics.values() for m in stage.values()):
            float32_states(metric)
        return module

    channels_last = False  # the images in (N, H, W, C) memory: the job's channels_last (use_channels_last)
    compile_backend: str | None = None  # the network compiled with this torch.compile backend (compile_network)

    def forward(self, x: torch.Tensor) -> SWWAEOutput:
        return self.net(x)

    def _laid_out(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    @torch.no_grad()
    def clean_features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The encoder's whats below the top for the clean images, without dropout: with
        ``clean_middle_targets`` the decoder denoises at every stage, as the ladder network's
        decoder does (targets without gradient, so features cannot shrink to fit them)."""
        with without_dropout(self.net):
            return self.net.encode(x)[0][:-1]

    def nll_weight(self) -> float:
        """lambda_nll, ramped up linearly over the first ``nll_warmup_epochs`` of training (in
        fractions of an epoch, counting the step being taken): the reconstructions shape the
        features before the classifier can fit its few labels. Full weight outside training.
        The epoch is counted in optimiser steps (``global_step``), as many as its batches only
        without ``accumulate_grad_batches``: counted in batches, accumulating 4 took 4 times the
        epochs asked to reach full weight."""
        hp = self.hparams
        if not hp.nll_warmup_epochs or not self.training or self._trainer is None:
            return hp.lambda_nll
        trainer = self.trainer
        steps = steps_an_epoch(trainer.num_training_batches, trainer.accumulate_grad_batches)
        progress = (self.global_step + 1) / max(1, steps)
        return hp.lambda_nll * min(1.0, progress / hp.nll_warmup_epochs)

    def losses(
        self, out: SWWAEOutput, x: torch.Tensor, y: torch.Tensor, middle_targets=None
    ) -> dict[str, torch.Tensor]:
        """``swwae.loss.swwae_loss`` with this module's weights (the NLL's warmed up)."""
        weights = loss_weights(self.hparams) | {"lambda_nll": self.nll_weight()}
        return swwae_loss(out, x, y, **weights, middle_targets=middle_targets)

    def training_step(self, batch, batch_idx):
        x, y = batch
        x, hp = self._laid_out(x), self.hparams
        noisy = x + hp.input_noise * torch.randn_like(x) if hp.input_noise else x
        targets = self.clean_features(x) if hp.clean_middle_targets and hp.lambda_m and self.num_stages > 1 else None
        terms = self.losses(self(noisy), x, y, targets)  # denoising: the targets are the clean images
        self.loss_watch.record(terms, self.current_epoch, self.global_step)  # checked in on_train_batch_end
        self.term_means.add(terms, len(x))  # the epoch's means, logged at its end (swwae.training.term_means)
        if loggers_write_this_step(self._trainer):
            # not prog_bar=True: Lightning would read the value back (a host sync) at once; the
            # progress bars read it when they show it (swwae.training.callbacks)
            self.log("train/loss_step", terms["loss"], on_step=True, on_epoch=False, sync_dist=True)
        return terms["loss"]

    @property
    def several_processes(self) -> bool:
        """Whether this module trains in one of several processes (DDP); not without a Trainer."""
        return self._trainer is not None and self.trainer.world_size > 1

    def log_epoch_means(self) -> None:
        """The training terms' means over the epoch's steps so far, one ``self.log`` each: the loss
        as ``train/loss_epoch`` (its steps are ``train/loss_step``), the others by their names. Under
        DDP, means over every process's samples (``TermMeans.pop``), the same in each process."""
        every_process = every_process_sum(self.trainer) if self._trainer is not None else None
        for name, value in self.term_means.pop(every_process).items():
            key = "train/loss_epoch" if name == "loss" else f"train/{name}"
            # sync_dist: a mean of equal values (Lightning warns at an epoch-level value without it)
            self.log(key, value, on_step=False, on_epoch=True, batch_size=1, sync_dist=True)

    def on_train_epoch_end(self) -> None:
        self.log_epoch_means()  # an epoch cut short (max_steps, a stop); a whole one logged at its last batch

    # non-finite losses: kept as they are every step, read back every log_every_n_steps
    # steps, at the end of each epoch and before any checkpoint is saved (swwae.training.nonfinite)

    def check_losses(self) -> None:
        """Raise ``NonFiniteError`` if a training step since the start had a non-finite loss;
        every process stops at the same check."""
        any_process = None
        if self.several_processes:
            any_process = functools.partial(self.trainer.strategy.reduce_boolean_decision, all=False)
        self.loss_watch.check(any_process)

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if processes_meet_after(self.trainer, batch_idx):
            self.check_losses()
        if reaches_max_steps(self.trainer):  # Lightning ends a run at max_steps mid-epoch without validating:
            # best.ckpt and the reported metrics would miss the steps since the last validation; asked to
            # stop, it validates first
            self.trainer.should_stop = True
        # an epoch's last batch: before the callbacks' on_train_epoch_end, which run before this
        # module's (the epoch lines show the means; one cut short logs them itself)
        if batch_idx + 1 == self.trainer.num_training_batches:
            self.log_epoch_means()

    def on_train_end(self) -> None:
        self.check_losses()

    def on_train_start(self) -> None:
        """The optimiser's form as this run built it (``swwae.optim.adam``: fused on CUDA, torch's
        default elsewhere), after a resume too: torch's ``load_state_dict`` takes every setting of
        a saved param group, ``fused`` and ``foreach`` with the rest, so a GPU run's checkpoint
        resumed on the CPU went on with a fused Adam there (other rounding than the CPU's
        documented runs), and a CPU run's resumed on a GPU without the fused kernel. A fused Adam
        counts its steps on its parameters' device, in float32 (torch's rule when it loads a fused
        state; Lightning leaves an unfused one's on the CPU), torch's plain one on the host, where
        reading the count waits for no GPU (a fused state's count left on a GPU cost a host sync a
        parameter a step): each state's count is moved where its Adam keeps it."""
        for optimizer in self.trainer.optimizers:
            for group in optimizer.param_groups:
                group.update(
                    {key: optimizer.defaults[key] for key in ("fused", "foreach") if key in optimizer.defaults}
                )
                on_device = group.get("fused") or group.get("capturable")
                for param in group["params"]:
                    state = optimizer.state.get(param, {})
                    step = state.get("step")
                    if isinstance(step, torch.Tensor):
                        state["step"] = step.to(param.device, torch.float32) if on_device else step.cpu()

    def _evaluate(self, batch, stage: str):
        x, y = batch
        if not len(x):  # a DDP process's empty share of a split smaller than the processes (EvaluationShare)
            return
        x = self._laid_out(x)
        out = self(x)
        metrics = self.metrics[stage]
        metrics["recon_mse"].update(*float32_pair(out.recon, x))
        for i, (decoded, target) in enumerate(out.middle_pairs, start=1):
            metrics[f"middle_mse_{i}"].update(*float32_pair(decoded, target))
        if "acc" in metrics:
            metrics["acc"].update(out.logits, y)
        if stage == "test":  # per image, in the split's order: paired tests between runs (McNemar); host: at the end
            predicted = out.logits.argmax(1) if out.logits is not None else torch.full_like(y, -1)
            mse = (out.recon.float() - x.float()).pow(2).flatten(1).mean(1)
            self.test_outcomes.append(torch.stack([y.double(), predicted.double(), mse.double()], 1))
        metrics["loss"].update(self.losses(out, x, y)["loss"], len(x))

    def _log_evaluation(self, stage: str) -> None:
        """The stage's metrics over its whole split, logged once at its end: a ``self.log`` per
        batch costs Lightning's host time and reads nothing the epoch's end cannot. Lightning
        computes the torchmetrics objects (their states gathered across processes) and resets them."""
        for name, metric in self.metrics[stage].items():
            self.log(f"{stage}/{name}", metric, prog_bar=name in ("recon_mse", "acc"))

    def validation_step(self, batch, batch_idx):
        self._evaluate(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._log_evaluation("val")

    def on_test_epoch_start(self) -> None:
        self.test_outcomes = []

    def test_step(self, batch, batch_idx):
        self._evaluate(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._log_evaluation("test")
        if self.several_processes:
            self.test_outcomes = self.every_process_outcomes()

    def every_process_outcomes(self) -> list[torch.Tensor]:
        """Under DDP, every process's test outcomes in the split's order, gathered into each: the
        processes tested their shares of it (``EvaluationShare``, whose batches say which images);
        none (no test_outcomes.csv) where the test loader shares the split out otherwise."""
        sampler = getattr(self.trainer.test_dataloaders, "sampler", None)
        if not isinstance(sampler, DistributedSampler):  # use_distributed_sampler=false: each tested it all
            return self.test_outcomes
        if not isinstance(sampler, EvaluationShare):
            return []
        mine = torch.cat(self.test_outcomes) if self.test_outcomes else torch.zeros(0, 3, dtype=torch.float64)
        images = torch.cat(list(sampler.share))[: len(mine)]  # limit_test_batches may have cut the share short
        rows = torch.cat([images.to(mine.device, mine.dtype)[:, None], mine], 1).to(self.device)
        sizes = [int(n) for n in every_process(torch.tensor([len(rows)], device=self.device))]
        padded = torch.nn.functional.pad(rows, (0, 0, 0, max(sizes) - len(rows)))
        every = torch.cat([part[:size] for part, size in zip(every_process(padded), sizes)])
        return [every[every[:, 0].argsort(), 1:]]

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Refuse to save non-finite weights: weights that blow up in the last step of an
        epoch would otherwise reach last.ckpt (through a NaN validation) before the next
        training step notices, and overwrite the last good checkpoint. A non-finite loss not yet
        reported is reported first: it is the cause. Every process saves (Lightning's
        ``save_checkpoint`` runs this hook in each, then waits for them all): they check together,
        or one that saw a non-finite loss would stop here alone while the others write and wait."""
        self.check_losses()
        weights = {name: t for name, t in checkpoint["state_dict"].items() if t.is_floating_point()}
        finite = torch.stack([torch.isfinite(t).all() for t in weights.values()]) if weights else None
        if finite is not None and not bool(finite.all()):  # one read from the device, not one a tensor
            bad = [name for name, ok in zip(weights, finite.tolist()) if not ok]
            raise NonFiniteError(
                f"non-finite weights in epoch {checkpoint.get('epoch', -1) + 1}, step {checkpoint.get('global_step')} "
                f"({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}); not saved over the last checkpoint; "
                "lower model.lr or model.beta, or check the data"
            )

    def configure_optimizers(self):
        hp = self.hparams
        # fused on CUDA (swwae.optim), unless Lightning is to clip the grad scaler's gradients
        optimizer = adam(self.parameters(), hp.lr, hp.weight_decay, fused=not clips_scaled_gradients(self._trainer))
        if hp.scheduler == "none":
            return optimizer
        epochs = self.trainer.max_epochs if self.trainer.max_epochs and self.trainer.max_epochs > 0 else 1
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, epochs))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}
