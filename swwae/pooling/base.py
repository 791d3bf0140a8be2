"""``Pool``: what every pooling mode shares (geometry, input checks, the size of the last
input) and the way a mode is built from a config and registered under its names."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from swwae.pooling.geometry import Geometry
from swwae.pooling.upsamplers import NearestUnpool


class Pool(nn.Module):
    """A pooling mode. Subclasses set ``modes`` (the config names they answer to),
    ``keeps_where`` (whether ``forward`` returns a where, or None), implement ``pool`` and,
    if their constructor differs from (kernel_size, stride, padding), ``from_config``."""

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

    @classmethod
    def from_config(
        cls, mode: str, *, channels: int | None, kernel_size, stride, padding, beta: float, wavelet: str
    ) -> Pool:
        """The pool a model config asks for (``swwae.pooling.make_pool``); each mode takes
        the settings it has."""
        return cls(kernel_size, stride, padding)

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
