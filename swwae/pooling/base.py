"""``Pool``: what every pooling mode shares (geometry, input checks, the size of the last
input). A mode is registered in the mode table (``swwae.pooling.modes``) and built by
``swwae.pooling.make_pool`` with the settings its constructor names."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from swwae.pooling.geometry import Geometry
from swwae.pooling.upsamplers import NearestUnpool


class Pool(nn.Module):
    """A pooling mode. Subclasses implement ``pool`` (returning what and a where, or None),
    set ``keeps_where`` (whether they return a where), may set ``modes`` (the config names
    they answer to, when they take ``mode``) and take, by name, the settings they need
    (``channels``, ``beta``, ``wavelet``, ...: ``make_pool`` passes those their constructor
    names). Their entry in ``swwae.pooling.modes`` says the rest (where, ceil, description)."""

    modes: ClassVar[tuple[str, ...]] = ()
    keeps_where: ClassVar[bool] = False
    mode: str

    def __init__(
        self,
        kernel_size: int | tuple[int, int] = 2,
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
    ):
        super().__init__()
        self.geometry = Geometry(kernel_size, stride, padding)
        self.input_size: tuple[int, int] | None = None

    def forward(self, x: Tensor):
        self.geometry.check(x)
        self.input_size = tuple(x.shape[-2:])
        return self.pool(x)

    def pool(self, x: Tensor):
        raise NotImplementedError

    def make_upsampler(self) -> nn.Module:
        """The where-free way back up (used for baselines and for 'where dropped')."""
        return NearestUnpool(self.geometry)

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}, {self.geometry}"
