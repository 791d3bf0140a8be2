"""What-where pooling as functions, beside the modules as ``torch.nn.functional`` is beside
``torch.nn``: no module to build and nothing to bind, because the where that the pooling returns
carries everything its unpooling needs (the windows' geometry and the input's shape):

    from swwae.pooling import unpool2d, what_where_pool2d

    what, where = what_where_pool2d(x, kernel_size=2, stride=1, padding=0, mode="hard")
    where.mask                  # shaped like x
    x_hat = unpool2d(v, where)  # v shaped like what -> shaped exactly like x

``mode`` is a mode of the table (``swwae.pooling.modes``) that keeps a where: ``hard`` (max
pooling's switches) or ``soft`` (the soft argmax, temperature ``beta``, checked as the ``soft``
entry declares it; other modes ignore it). ``WhatWherePool`` and ``Unpool`` run these same
functions, so the two forms agree bit for bit. The where-free baselines have no functional form:
their way back up holds weights (``strided``), filters (``wavelet``) or the size of an input it
no longer sees (nearest upsampling), which is what a module is for.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from swwae.pooling.geometry import Geometry
from swwae.pooling.modes import POOL_MODES, where_modes
from swwae.pooling.soft import soft_pool
from swwae.pooling.wheres import HardWhere, SoftWhere


def what_where_pool2d(
    x: Tensor,
    kernel_size: int | tuple[int, int],
    stride: int | tuple[int, int] | None = None,
    padding: int | tuple[int, int] = 0,
    mode: str = "hard",
    beta: float | None = None,
) -> tuple[Tensor, HardWhere | SoftWhere]:
    """(what, where) of ``x`` (N, C, H, W): ``what`` the pooled map, ``where`` what its
    unpooling needs (``unpool2d``). ``stride`` None: the kernel's; ``beta`` None: the default
    its mode declares (``POOL_MODES["soft"].settings["beta"]``). ValueError (one line) for a
    mode without a where, a bad geometry or setting, or a kernel larger than the map."""
    geometry = Geometry(kernel_size, stride, padding)
    where = where_of(mode)
    beta = POOL_MODES[mode].checked({} if beta is None else {"beta": beta}).get("beta")
    geometry.check(x)
    return pool_with_where(x, geometry, where, beta)


def unpool2d(v: Tensor, where: HardWhere | SoftWhere) -> Tensor:
    """``v`` (shaped like the pooling's what) sent back through ``where``: a tensor shaped
    exactly like the pooling's input. Hard: the adjoint of max pooling at the recorded input
    (overlapping windows add up); soft: a bilinear splat at each position. Any where with an
    ``unpool`` (a registered mode's own) goes back its own way."""
    if getattr(where, "unpool", None) is None:
        raise TypeError(
            f"unpool2d takes the where that what_where_pool2d returned, got {type(where).__name__} "
            "(a where-free pool goes back up through its module: Unpool(pool))"
        )
    return where.unpool(v)


def where_of(mode: object) -> str:
    """What ``mode`` records (``hard`` or ``soft``), as its entry in the table says; ValueError
    (one line) for a mode that keeps no where."""
    entry = POOL_MODES.get(mode) if isinstance(mode, str) else None
    if entry is None or not entry.keeps_where:
        choices = ", ".join(where_modes())
        raise ValueError(f"what-where pooling takes a mode that keeps a where ({choices}), got {mode!r}")
    return entry.where


def pool_with_where(
    x: Tensor, geometry: Geometry, where: str, beta: float | None
) -> tuple[Tensor, HardWhere | SoftWhere]:
    """The pooling of both forms, on an input that ``geometry`` has checked: max pooling and its
    switches (``where="hard"``), or the soft max and soft argmax of every window at temperature
    ``beta`` (checked)."""
    if where == "hard":
        what, indices = F.max_pool2d(x, geometry.kernel, geometry.stride, geometry.padding, return_indices=True)
        return what, HardWhere(indices, x, geometry)
    what, in_window_row, in_window_col = soft_pool(x, geometry, float(beta))
    return what, SoftWhere(in_window_row, in_window_col, x.shape, geometry)
