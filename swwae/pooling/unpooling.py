"""``Unpool``: unpooling bound to one pool, sending values back through its recorded where
(``swwae.pooling.functional.unpool2d``), or through its where-free upsampler when there is
none."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from swwae.pooling.base import Pool
from swwae.pooling.functional import unpool2d
from swwae.pooling.upsamplers import shown
from swwae.pooling.wheres import HardWhere, SoftWhere


class Unpool(nn.Module):
    """Unpooling bound to one pool: same windows, no global state.

    ``unpool(v, where)`` sends v back through the recorded where and returns a tensor shaped
    exactly like the pool's input. With ``where=None`` (a where-free baseline, or a where
    deliberately dropped) it upsamples without positions to ``output_size``, or to the size
    the pool last saw (when the values are shaped like its last what: a pool run since on
    another size leaves no size for them). One ValueError line for a size they cannot go up to,
    and for an ``output_size`` given with a where that is not the size of the where's input.
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
        if output_size is not None and not (isinstance(output_size, Sequence) and len(output_size) >= 2):
            raise ValueError(f"output_size must end with the (H, W) to unpool to, got {output_size!r}")
        if where is not None:
            up, size = unpool2d(v, where), output_size
        else:
            size = output_size if output_size is not None else self.pool.input_size
            if size is None:
                raise ValueError("unpooling without a where needs output_size (the pool has not run yet)")
            if output_size is None and tuple(v.shape[-2:]) != self.pool.what_size:
                raise ValueError(
                    f"unpooling {shown(v.shape)} values without a where or output_size: the pool last pooled "
                    f"{shown(size)} to {shown(self.pool.what_size)}; pass output_size, the size they were pooled from"
                )
            up = self.upsampler(v, tuple(size)[-2:])
        # a where brings values to its input's size only; an upsampler (a registered mode's) to the sizes it can
        if size is not None and up.shape[-2:] != tuple(size)[-2:]:
            raise ValueError(
                f"unpooling brings {shown(v.shape)} values up to {shown(up.shape)}, not the {shown(size)} asked: "
                "output_size must be the size they were pooled from"
            )
        return up

    def extra_repr(self) -> str:
        return f"bound to {self.pool.extra_repr()}"
