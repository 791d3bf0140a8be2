"""``Unpool``: unpooling bound to one pool, sending values back through its recorded where
(``swwae.pooling.functional.unpool2d``), or through its where-free upsampler when there is
none."""

from __future__ import annotations

from torch import Tensor, nn

from swwae.pooling.base import Pool
from swwae.pooling.functional import unpool2d
from swwae.pooling.wheres import HardWhere, SoftWhere


class Unpool(nn.Module):
    """Unpooling bound to one pool: same windows, no global state.

    ``unpool(v, where)`` sends v back through the recorded where and returns a tensor shaped
    exactly like the pool's input. With ``where=None`` (a where-free baseline, or a where
    deliberately dropped) it upsamples without positions to ``output_size``, or to the size
    the pool last saw.
    """

    def __init__(self, pool: Pool):
        super().__init__()
        self._pool = (pool,)  # bound, not registered: the pool's weights stay in the encoder
        self.upsampler = pool.make_upsampler()

    @property
    def pool(self) -> Pool:
        return self._pool[0]

    def forward(
        self, v: Tensor, where: HardWhere | SoftWhere | None = None, output_size: tuple[int, ...] | None = None
    ) -> Tensor:
        if where is not None:
            return unpool2d(v, where)
        size = output_size if output_size is not None else self.pool.input_size
        if size is None:
            raise ValueError("unpooling without a where needs output_size (the pool has not run yet)")
        return self.upsampler(v, tuple(size)[-2:])

    def extra_repr(self) -> str:
        return f"bound to {self.pool.extra_repr()}"
