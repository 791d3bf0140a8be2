"""The Stacked What-Where Auto-encoder. Pure torch: no Lightning, no Hydra.

The network is written in the paper's notation (``swwae.arch``), e.g.
``(64)5c-2p-(64)3c-2p-(64)3c-2p-10fc``. Encoder stage i: one or more convs, each conv ->
(batch norm) -> nonlinearity -> (dropout), then the pool that closes the stage, giving
what_i (fed to stage i+1) and where_i. Decoder stage i mirrors it: unpool what's coming down
with *its own* encoder pool's where, then the stage's convs in reverse, each conv ->
nonlinearity (sigmoid at the image). Decoder stage i reconstructs the input of encoder stage
i: the image for i = 0, what_{i-1} above; those are the "middle" reconstructions of the
paper. An optional linear classifier (``Nfc``) reads the top what.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import islice

import torch
from torch import Tensor, nn

from swwae.arch import Stage, check_fits
from swwae.errors import ConfigError
from swwae.pooling import Pool, Unpool, make_pool
from swwae.pretrained import Pretrained
from swwae.settings import (
    NONLINEARITIES,
    NetworkSettings,
    check_network,
    check_pool_settings,
    network_keys,
    network_spec,
    pool_mode_of,
    trains_classifier,  # noqa: F401 - swwae.model.trains_classifier, as before
)
from swwae.settings import (
    pool_settings as declared_pool_settings,
)
from swwae.stored import plain

NETWORK = NetworkSettings()  # the network's defaults (swwae.settings, the one declaration)
DATA_ARGS = ("image_shape", "num_classes", "pixel_mean")  # from the data, not from the model config

# helpers


@contextlib.contextmanager
def eval_mode(module: nn.Module):
    """``with eval_mode(net):`` the block runs in eval mode (batch norm on its running
    statistics, no dropout); then ``module`` is back in the mode it was in, even if the
    block raised."""
    was_training = module.training
    module.eval()
    try:
        yield module
    finally:
        module.train(was_training)


@contextlib.contextmanager
def without_dropout(module: nn.Module):
    """``with without_dropout(net):`` dropout layers pass their input through; everything
    else (batch norm) stays in the mode it is in."""
    dropouts = [m for m in module.modules() if isinstance(m, nn.modules.dropout._DropoutNd) and m.training]
    for m in dropouts:
        m.eval()
    try:
        yield module
    finally:
        for m in dropouts:
            m.train()


@dataclass
class SWWAEOutput:
    recon: Tensor  # the reconstructed image, shaped like the input, in [0, 1]
    whats: list[Tensor]  # what of every encoder stage; whats[-1] is the top code
    wheres: list  # where of every stage (None for where-free pools)
    decoded: list[Tensor]  # decoded[i] reconstructs the input of encoder stage i
    logits: Tensor | None  # class scores from the top what, or None without a head

    @property
    def middle_pairs(self) -> list[tuple[Tensor, Tensor]]:
        """(decoder reconstruction, encoder target) for every stage above the image."""
        return list(zip(self.decoded[1:], self.whats[:-1]))


def conv_layers(
    c_in: int, c_out: int, kernel: int, activation: nn.Module, batch_norm: bool, dropout: float
) -> list[nn.Module]:
    """conv -> (batch norm) -> nonlinearity -> (dropout), as a list of layers."""
    layers = [nn.Conv2d(c_in, c_out, kernel, padding=kernel // 2, bias=not batch_norm)]
    if batch_norm:
        layers.append(nn.BatchNorm2d(c_out))
    layers.append(activation)
    if dropout:
        layers.append(nn.Dropout2d(dropout))
    return layers


def encoder_stage(
    c_in: int, stage: Stage, activation: type[nn.Module], batch_norm: bool, dropout: float
) -> nn.Sequential:
    """The stage's convs in order, ``c_in`` maps in, ``stage.channels`` out (the pool that
    closes the stage is kept apart: the decoder binds to it)."""
    maps = [c_in] + [conv.channels for conv in stage.convs]
    return nn.Sequential(
        *[
            layer
            for conv, a, b in zip(stage.convs, maps[:-1], maps[1:])
            for layer in conv_layers(a, b, conv.kernel, activation(), batch_norm, dropout)
        ]
    )


def decoder_stage(
    c_in: int, stage: Stage, activation: type[nn.Module], batch_norm: bool, to_image: bool
) -> nn.Sequential:
    """The mirror of ``encoder_stage``: its convs in reverse, each back to its input maps, no
    dropout; the last conv of the image decoder (``to_image``) ends in a sigmoid, without
    batch norm, so the reconstruction lies in [0, 1]."""
    maps = [c_in] + [conv.channels for conv in stage.convs]
    steps = list(zip(stage.convs, maps[:-1], maps[1:]))[::-1]  # (conv, its input maps, its output maps)
    layers = []
    for j, (conv, a, b) in enumerate(steps):
        last = to_image and j == len(steps) - 1
        layers += conv_layers(b, a, conv.kernel, nn.Sigmoid() if last else activation(), batch_norm and not last, 0.0)
    return nn.Sequential(*layers)


def stage_pool(mode: str, stage: Stage, stride: int | None, padding: int, **settings) -> Pool:
    """The pool that closes ``stage``: its PxP windows, in the model's pooling mode, with the
    settings that mode reads (its ``parameters`` in the mode table: ``beta``, ``wavelet``)."""
    try:
        return make_pool(mode, stage.channels, stage.pool, stride, padding, **settings)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"model pooling: {err}") from None


def convs(block: nn.Sequential) -> list[nn.Conv2d]:
    """The convolutions of an encoder or decoder stage, in order."""
    return [m for m in block if isinstance(m, nn.Conv2d)]


def logit(p: float) -> float:
    p = min(max(float(p), 1e-3), 1 - 1e-3)
    return math.log(p / (1 - p))


# classes


def shown(image_shape: Sequence[int]) -> str:
    """An image shape in words: ``1 x 28 x 28``."""
    return " x ".join(str(n) for n in image_shape)


class SWWAE(nn.Module, Pretrained):
    """Encoder/decoder pairs bound through their pools, plus an optional classifier head.

    ``pool_mode`` is a mode of the mode table (``swwae.pooling.modes``): ``hard`` and ``soft``
    keep the where, the others are where-free baselines. ``net.settings`` are its
    constructor's arguments; ``net.save_pretrained(folder)`` writes it as a model folder
    (``swwae.pretrained``).
    """

    def __init__(
        self,
        image_shape: Sequence[int] = (1, 28, 28),
        arch: str | None = NETWORK.arch,
        widths: Sequence[int] = NETWORK.widths,
        kernel_size: int = NETWORK.kernel_size,
        pool_size: int = NETWORK.pool_size,
        pool_mode: str = NETWORK.pool_mode,
        pool_stride: int | None = NETWORK.pool_stride,
        pool_padding: int = NETWORK.pool_padding,
        nonlinearity: str = NETWORK.nonlinearity,
        batch_norm: bool = NETWORK.batch_norm,
        dropout: float = NETWORK.dropout,
        num_classes: int | None = 10,
        classifier_dropout: float = NETWORK.classifier_dropout,
        pixel_mean: float | Sequence[float] | None = None,
        **pool_settings,
    ):
        """``arch`` is the network in the paper's notation; without it, ``widths``,
        ``kernel_size`` and ``pool_size`` are the shorthand for one conv and one pool per
        width, plus a classifier over ``num_classes`` (None: none). With it, its ``Nfc``
        token decides the classifier, and N must equal ``num_classes`` when that is given.
        ``pool_stride`` / ``pool_padding`` apply to every pool (None / 0: the paper's PxP
        windows, stride P). ``pool_settings``: the settings pooling modes declare (``beta=``
        for soft, ``wavelet=``; ``swwae.pooling.modes``), defaults for those not given.
        ``pixel_mean`` (per channel, in [0, 1]) starts the image decoder's output bias at its
        logit, so that a pixel no unpooled value reaches starts at the mean colour instead of
        sigmoid(0) = 0.5 grey. The defaults are the schema's (``swwae.settings``)."""
        arguments = locals()  # first: the constructor's arguments only, for config.json
        super().__init__()
        unknown = sorted(set(pool_settings) - set(declared_pool_settings()))
        if unknown:
            takes = ", ".join(network_keys())
            raise ConfigError(f"model.{unknown[0]} is not a model setting; the network takes {takes}")
        check_network(kernel_size, pool_mode, nonlinearity, dropout, image_shape)
        pool_entry = pool_mode_of(pool_mode)
        pooling = check_pool_settings(pool_entry, pool_settings)
        given = {name: arguments[name] for name in (*DATA_ARGS, *NetworkSettings.model_fields)}
        self.settings = plain(given | pooling)  # its mode's settings only: config.json needs no other mode
        spec = network_spec(arch, widths, kernel_size, pool_size, num_classes)
        check_fits(spec, image_shape, pool_stride, pool_padding, ceil=pool_entry.ceil)
        self.image_shape, self.pool_mode, self.arch = tuple(image_shape), pool_mode, str(spec)
        layers = dict(activation=getattr(nn, NONLINEARITIES[nonlinearity]), batch_norm=batch_norm)
        pooling = dict(stride=pool_stride, padding=pool_padding) | pooling
        self.encoders, self.pools = nn.ModuleList(), nn.ModuleList()
        self.decoders, self.unpools = nn.ModuleList(), nn.ModuleList()
        channels = image_shape[0]
        for i, stage in enumerate(spec.stages):
            self.encoders.append(encoder_stage(channels, stage, dropout=dropout, **layers))
            self.decoders.append(decoder_stage(channels, stage, to_image=i == 0, **layers))
            self.pools.append(stage_pool(pool_mode, stage, **pooling))
            self.unpools.append(Unpool(self.pools[-1]))
            channels = stage.channels
        if pixel_mean is not None:
            self._start_output_at(pixel_mean)
        self.top_shape = self._dry_run()
        self.classifier = None
        if spec.classes:
            features = math.prod(self.top_shape)
            self.classifier = nn.Sequential(
                nn.Flatten(), nn.Dropout(classifier_dropout), nn.Linear(features, spec.classes)
            )

    @classmethod
    def setting_names(cls) -> set[str]:
        return {*DATA_ARGS, *network_keys()}

    @classmethod
    def from_settings(
        cls,
        settings: Mapping,
        image_shape: Sequence[int],
        num_classes: int | None = 10,
        pixel_mean: float | Sequence[float] | None = None,
    ) -> SWWAE:
        """The network of a flat model config (``configs/model/*.yaml``, a checkpoint's
        ``hyper_parameters``): its network keys, a classifier over ``num_classes`` only if the
        config trains one (``trains_classifier``); the training keys (loss weights, optimiser)
        are left to the caller."""
        net = {k: v for k, v in settings.items() if k in network_keys()}
        return cls(
            image_shape=tuple(image_shape),
            num_classes=num_classes if trains_classifier(settings) else None,
            pixel_mean=pixel_mean,
            **net,
        )

    def _start_output_at(self, pixel_mean: float | Sequence[float]) -> None:
        """The image decoder's output bias at logit(mean pixel), per channel."""
        output = convs(self.decoders[0])[-1]
        means = [pixel_mean] * self.image_shape[0] if isinstance(pixel_mean, (int, float)) else list(pixel_mean)
        if len(means) != self.image_shape[0] or not all(0 <= float(m) <= 1 for m in means):
            raise ConfigError(
                f"pixel_mean must be one value in [0, 1], or one a channel ({self.image_shape[0]}), got {pixel_mean}"
            )
        with torch.no_grad():
            output.bias.copy_(torch.tensor([logit(m) for m in means]))

    def encode(self, x: Tensor, stages: int | None = None):
        """Image -> (whats, wheres, pre-pool sizes), one entry per stage (the first
        ``stages`` only, if given)."""
        self._check_images(x)
        whats, wheres, sizes = [], [], []
        # islice, not [:stages]: slicing a ModuleList builds a new one, at every forward pass
        for encoder, pool in islice(zip(self.encoders, self.pools), stages):
            h = encoder(x)
            sizes.append(h.shape[-2:])
            x, where = pool(h)
            whats.append(x)
            wheres.append(where)
        return whats, wheres, sizes

    def decode(self, top: Tensor, wheres, sizes) -> list[Tensor]:
        """Top what -> decoded[i] for every stage, top-down. A where of None is upsampled
        without positions: pass ``[None] * n`` to see what the where is worth."""
        decoded = [None] * len(self.decoders)
        v = top
        for i in reversed(range(len(self.decoders))):
            v = self.decoders[i](self.unpools[i](v, wheres[i], output_size=sizes[i]))
            decoded[i] = v
        return decoded

    def forward(self, x: Tensor) -> SWWAEOutput:
        if self.classifier is not None and tuple(x.shape[-2:]) != self.image_shape[1:]:
            raise ValueError(
                f"this network's classifier takes the {shown(self.image_shape)} images it was built for, got shape "
                f"{tuple(x.shape)} (net.encode and net.decode take any size)"
            )
        whats, wheres, sizes = self.encode(x)
        decoded = self.decode(whats[-1], wheres, sizes)
        logits = self.classifier(whats[-1]) if self.classifier is not None else None
        return SWWAEOutput(decoded[0], whats, wheres, decoded, logits)

    @torch.no_grad()
    def reconstruct_without_where(self, x: Tensor) -> Tensor:
        """The same top what, decoded with every where dropped (nearest upsampling)."""
        whats, wheres, sizes = self.encode(x)
        return self.decode(whats[-1], [None] * len(wheres), sizes)[0]

    def _check_images(self, x: Tensor) -> None:
        """One ValueError line for input the network cannot take, instead of a layer's message
        about its weights (a classifier's matrix, a conv's channels) or a pool's, deeper in."""
        if x.dim() != 4 or x.shape[1] != self.image_shape[0] or not x.is_floating_point():
            raise ValueError(
                f"this network takes float (N, {self.image_shape[0]}, H, W) images (built for "
                f"{shown(self.image_shape)}, pixels in [0, 1]), got shape {tuple(x.shape)} of {x.dtype}"
            )

    def _dry_run(self) -> tuple[int, ...]:
        """Push one blank image through, to size the head and to reject geometries that
        cannot work (a pool larger than its feature map) before any training."""
        x = torch.zeros(1, *self.image_shape)
        try:
            with eval_mode(self), torch.no_grad():
                for i, (encoder, pool) in enumerate(zip(self.encoders, self.pools)):  # noqa: B007 - i: the failing stage
                    x, _ = pool(encoder(x))
        except ValueError as err:
            raise ConfigError(f"model stage {i + 1} of {len(self.pools)} on {self.image_shape} images: {err}") from None
        return tuple(x.shape[1:])
