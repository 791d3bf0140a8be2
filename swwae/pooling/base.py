"""``Pool``: what every pooling mode shares (geometry, input checks, the sizes of the last
input and its what). A class holds how a mode pools; its entry in the mode table (``swwae.pooling.modes``)
holds what the mode is (its name, what it records, its settings), and
``swwae.pooling.make_pool`` builds the class with the settings the entry declares."""

from __future__ import annotations

from torch import Tensor, nn

from swwae.pooling.geometry import Geometry
from swwae.pooling.upsamplers import NearestUnpool


class Pool(nn.Module):
    """How a mode pools. Subclasses implement ``pool`` (returning what and a where, or None, as
    their entry's ``where`` says) and take, by name, the settings their entry declares (``beta``,
    ``wavelet``, ...) and those of ``mode``, ``channels`` and the geometry they need:
    ``make_pool`` passes what their constructor names."""

    def __init__(
        self,
        kernel_size: int | tuple[int, int] = 2,
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
    ):
        super().__init__()
        self.geometry = Geometry(kernel_size, stride, padding)
        # the sizes of the last input and of its what: where ``Unpool`` without a where and
        # without output_size brings values back to, and what it checks they came from
        self.input_size: tuple[int, int] | None = None
        self.what_size: tuple[int, int] | None = None

    def forward(self, x: Tensor):
        self.geometry.check(x)
        self.input_size = tuple(x.shape[-2:])
        what, where = self.pool(x)
        self.what_size = tuple(what.shape[-2:])
        return what, where

    def pool(self, x: Tensor):
        raise NotImplementedError

    def make_upsampler(self) -> nn.Module:
        """The where-free way back up (used for baselines and for 'where dropped')."""
        return NearestUnpool(self.geometry)

    def extra_repr(self) -> str:
        return str(self.geometry)
