"""The Stacked What-Where Auto-encoder. Pure torch: no Lightning, no Hydra.

Encoder stage i: conv -> (batch norm) -> nonlinearity -> (dropout) -> pool, giving what_i
(fed to stage i+1) and where_i. Decoder stage i mirrors it: unpool what's coming down with
*its own* encoder pool's where, then conv -> nonlinearity (sigmoid at the image). Decoder
stage i reconstructs the input of encoder stage i: the image for i = 0, what_{i-1} above;
those are the "middle" reconstructions of the paper. An optional linear classifier reads
the top what.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from swwae.errors import ConfigError
from swwae.pooling import MODES, Unpool, make_pool

NONLINEARITIES = {"relu": nn.ReLU, "leaky_relu": nn.LeakyReLU, "elu": nn.ELU, "gelu": nn.GELU, "tanh": nn.Tanh}

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


def conv_block(c_in: int, c_out: int, kernel: int, activation: nn.Module, batch_norm: bool, dropout: float):
    layers = [nn.Conv2d(c_in, c_out, kernel, padding=kernel // 2, bias=not batch_norm)]
    if batch_norm:
        layers.append(nn.BatchNorm2d(c_out))
    layers.append(activation)
    if dropout:
        layers.append(nn.Dropout2d(dropout))
    return nn.Sequential(*layers)


# classes


class SWWAE(nn.Module):
    """Encoder/decoder pairs bound through their pools, plus an optional classifier head.

    ``pool_mode`` is one of ``swwae.pooling.MODES``: ``hard`` and ``soft`` keep the where,
    the others are where-free baselines.
    """

    def __init__(
        self,
        image_shape=(1, 28, 28),
        widths=(32, 64),
        kernel_size: int = 3,
        pool_mode: str = "hard",
        pool_size=2,
        pool_stride=None,
        pool_padding=0,
        beta: float = 100.0,
        wavelet: str = "haar",
        nonlinearity: str = "relu",
        batch_norm: bool = False,
        dropout: float = 0.0,
        num_classes: int | None = 10,
        classifier_dropout: float = 0.0,
    ):
        super().__init__()
        widths = list(widths or [])
        _check_config(widths, kernel_size, pool_mode, beta, nonlinearity, dropout, image_shape)
        self.image_shape, self.pool_mode = tuple(image_shape), pool_mode
        act = NONLINEARITIES[nonlinearity]
        channels = [image_shape[0], *widths]
        self.encoders, self.pools = nn.ModuleList(), nn.ModuleList()
        self.decoders, self.unpools = nn.ModuleList(), nn.ModuleList()
        for c_in, c_out in zip(channels[:-1], channels[1:]):
            self.encoders.append(conv_block(c_in, c_out, kernel_size, act(), batch_norm, dropout))
            try:
                pool = make_pool(pool_mode, c_out, pool_size, pool_stride, pool_padding, beta, wavelet)
            except ValueError as err:
                raise ConfigError(f"model pooling: {err}") from None
            self.pools.append(pool)
            self.unpools.append(Unpool(pool))
            is_image = len(self.decoders) == 0
            out_act = nn.Sigmoid() if is_image else act()
            self.decoders.append(conv_block(c_out, c_in, kernel_size, out_act, batch_norm and not is_image, 0.0))
        self.top_shape = self._dry_run()
        self.classifier = None
        if num_classes:
            features = int(torch.tensor(self.top_shape).prod())
            self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(classifier_dropout), nn.Linear(features, num_classes))

    def encode(self, x: Tensor, stages: int | None = None):
        """Image -> (whats, wheres, pre-pool sizes), one entry per stage (the first
        ``stages`` only, if given)."""
        whats, wheres, sizes = [], [], []
        for encoder, pool in zip(self.encoders[:stages], self.pools[:stages]):
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
        whats, wheres, sizes = self.encode(x)
        decoded = self.decode(whats[-1], wheres, sizes)
        logits = self.classifier(whats[-1]) if self.classifier is not None else None
        return SWWAEOutput(decoded[0], whats, wheres, decoded, logits)

    @torch.no_grad()
    def reconstruct_without_where(self, x: Tensor) -> Tensor:
        """The same top what, decoded with every where dropped (nearest upsampling)."""
        whats, wheres, sizes = self.encode(x)
        return self.decode(whats[-1], [None] * len(wheres), sizes)[0]

    def _dry_run(self) -> tuple[int, ...]:
        """Push one blank image through, to size the head and to reject geometries that
        cannot work (a pool larger than its feature map) before any training."""
        x = torch.zeros(1, *self.image_shape)
        try:
            with eval_mode(self), torch.no_grad():
                for i, (encoder, pool) in enumerate(zip(self.encoders, self.pools)):
                    x, _ = pool(encoder(x))
        except ValueError as err:
            raise ConfigError(f"model stage {i + 1} of {len(self.pools)} on {self.image_shape} images: {err}") from None
        return tuple(x.shape[1:])


def _check_config(widths, kernel_size, pool_mode, beta, nonlinearity, dropout, image_shape):
    """Reject values that cannot work, each with one line that says what to change."""
    if not widths or any(not isinstance(w, int) or w < 1 for w in widths):
        raise ConfigError(f"model.widths must be a non-empty list of positive ints, got {widths}")
    if not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ConfigError(f"model.kernel_size must be a positive odd int (same-size convs), got {kernel_size}")
    if pool_mode not in MODES:
        raise ConfigError(f"model.pool_mode={pool_mode!r} is unknown; choose one of {', '.join(MODES)}")
    if pool_mode == "soft" and not beta > 0:
        raise ConfigError(f"model.beta must be > 0 for soft pooling, got {beta}")
    if nonlinearity not in NONLINEARITIES:
        raise ConfigError(f"model.nonlinearity={nonlinearity!r} is unknown; choose one of {', '.join(NONLINEARITIES)}")
    if not 0 <= dropout < 1:
        raise ConfigError(f"model.dropout must be in [0, 1), got {dropout}")
    if len(image_shape) != 3:
        raise ConfigError(f"image_shape must be (channels, height, width), got {image_shape}")
