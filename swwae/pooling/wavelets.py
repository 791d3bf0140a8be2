"""Wavelet filter banks as plain Python, for the ``wavelet`` baseline.

ptwt takes a wavelet name or any object with pywt's ``Wavelet`` interface. pywt's own
``Wavelet`` is a C extension type, built anew from the name on every call, and torch.compile
cannot trace through it (nor through ``pywt.dwt_coeff_len``): the pools hand ptwt a
``FilterBank`` read once from pywt instead, and size their outputs with
``coefficient_length``. The transform and its numbers are the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import pywt


@dataclass(frozen=True)
class FilterBank:
    """The four filters of a discrete wavelet (ptwt's ``Wavelet`` protocol)."""

    name: str
    dec_lo: tuple[float, ...]
    dec_hi: tuple[float, ...]
    rec_lo: tuple[float, ...]
    rec_hi: tuple[float, ...]

    @classmethod
    def of(cls, name: str) -> FilterBank:
        """The filters of pywt's wavelet ``name`` (``haar``, ``db2``, ...)."""
        return cls(name, *(tuple(map(float, f)) for f in pywt.Wavelet(name).filter_bank))

    @property
    def dec_len(self) -> int:
        return len(self.dec_lo)

    @property
    def rec_len(self) -> int:
        return len(self.rec_lo)

    @property
    def filter_bank(self) -> tuple[tuple[float, ...], ...]:
        return self.dec_lo, self.dec_hi, self.rec_lo, self.rec_hi

    def __len__(self) -> int:
        return len(self.dec_lo)


def coefficient_length(size: int, filter_len: int) -> int:
    """Length of one level's coefficients of a signal of ``size`` samples, in every padding
    mode but periodization (``pywt.dwt_coeff_len``)."""
    return (size + filter_len - 1) // 2
