"""What-where pooling and the unpooling bound to it. Pure torch: no Lightning, no Hydra.

A pool returns ``what`` (the pooled map, fed to the next stage) and ``where`` (which input
positions won). ``Unpool(pool)`` sends values back through the same windows:

    pool = WhatWherePool(kernel_size=2, mode="hard")
    what, where = pool(x)          # where.mask is shaped like x
    x_hat = Unpool(pool)(what, where)

or, as functions (``torch.nn.functional``'s way; the where carries what unpooling needs):

    what, where = what_where_pool2d(x, kernel_size=2, mode="hard")
    x_hat = unpool2d(what, where)

* ``hard``: ``what`` is ``F.max_pool2d``; the mask is d sum(what) / dx (the gradient-of-sum
  trick), and unpooling is the exact adjoint of max pooling at the recorded input (the
  deconvnet's "switches"): values of overlapping windows add up, unlike ``nn.MaxUnpool2d``,
  which overwrites, and which raises under ``torch.use_deterministic_algorithms(True)``.
* ``soft``: the SWWAE paper's soft max / soft argmax with temperature ``beta``; unpooling
  splats each value bilinearly at its continuous position.
* where-free baselines, ``where is None``: ``upsample`` (max pool, nearest up), ``avg``,
  ``strided`` (conv down, transposed conv up) and ``wavelet`` (low-pass band down, inverse
  transform with zero details up).

The package, one module per job, each importing only modules listed above it:

* ``geometry``: kernel, stride and padding (``Geometry``, ``pooled_size``);
* ``layout``: the memory format a pool answers in (its input's, channels-last included);
* ``fused``: the soft where as fused Triton kernels, forward and backward (CUDA);
* ``soft``: the soft pooling internals (window layout, the soft max / soft argmax and the
  in-window splat as autograd Functions), and the choice of the fused kernels where they run;
* ``wheres``: what a pool records, ``HardWhere`` and ``SoftWhere``, and the generic ``splat``;
* ``upsamplers``: the where-free ways back up (nearest, transposed conv, inverse wavelet);
* ``functional``: ``what_where_pool2d`` and ``unpool2d``, the hard and soft pooling as
  functions;
* ``base``: ``Pool``, what every mode shares;
* ``pools``: ``WhatWherePool``, the baselines, ``make_pool`` and ``POOLS`` (mode name ->
  class), ``MODES``, ``WHERE_MODES``, ``WHERELESS_MODES``: views of the mode table;
* ``unpooling``: ``Unpool``, bound to its pool.

The mode table is ``swwae.pooling.modes`` (on ``swwae.pooling.registry``; plain Python: the
config checks read it before torch loads): each mode's facts (its class, what it records, its
settings) are stated there once, and the classes hold only how they pool. A new mode is a
``Pool`` subclass and one ``PoolMode`` entry there (or ``POOL_MODES.register(PoolMode(...))``
from outside the package). The package imports nothing of swwae outside itself, and nothing
until a name is used: PyWavelets only when a wavelet pool is built.
"""

from importlib import import_module

# name -> the module that defines it, imported on first use (PEP 562): the mode table
# (``swwae.pooling.modes``) is read without torch, and nothing loads what it does not use
WHERE = {
    "POOL_MODES": "modes",
    "PoolMode": "modes",
    "Setting": "modes",
    "Pool": "base",
    "Geometry": "geometry",
    "pooled_size": "geometry",
    "unpool2d": "functional",
    "what_where_pool2d": "functional",
    "POOLS": "pools",
    "MODES": "pools",
    "WHERE_MODES": "pools",
    "WHERELESS_MODES": "pools",
    "AvgPool": "pools",
    "MaxUpsamplePool": "pools",
    "StridedConvPool": "pools",
    "WaveletPool": "pools",
    "WhatWherePool": "pools",
    "make_pool": "pools",
    "Unpool": "unpooling",
    "NearestUnpool": "upsamplers",
    "TransposedConvUnpool": "upsamplers",
    "WaveletUnpool": "upsamplers",
    "window_owner_upsample": "upsamplers",
    "HardWhere": "wheres",
    "SoftWhere": "wheres",
    "splat": "wheres",
}
__all__ = [
    "MODES",
    "POOL_MODES",
    "POOLS",
    "WHERE_MODES",
    "WHERELESS_MODES",
    "AvgPool",
    "Geometry",
    "HardWhere",
    "MaxUpsamplePool",
    "NearestUnpool",
    "Pool",
    "PoolMode",
    "Setting",
    "SoftWhere",
    "StridedConvPool",
    "TransposedConvUnpool",
    "Unpool",
    "WaveletPool",
    "WaveletUnpool",
    "WhatWherePool",
    "make_pool",
    "pooled_size",
    "splat",
    "unpool2d",
    "what_where_pool2d",
    "window_owner_upsample",
]


def __getattr__(name: str):
    if name not in WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{WHERE[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *WHERE})
