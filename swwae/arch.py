"""The SWWAE paper's layer notation, read into stages.

``(C)Kc`` is a convolution with C maps and a KxK kernel, ``Pp`` a PxP pooling (stride P)
that closes a stage, ``Nfc`` the classifier over N classes (last, optional); tokens are
joined by ``-``::

    (64)5c-2p-(64)3c-2p-(64)3c-2p-10fc      three stages of one conv, a classifier
    (16)5c-(32)3c-4p                         one stage of two convs, no classifier

Pure Python: the model builds its layers from the parsed :class:`Arch`, the configs and the
checkpoint monitor read whether it has a classifier.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from swwae.errors import ConfigError, excerpt

# ASCII digits only: \d and int() also read full-width and other scripts' digits
CONV = re.compile(r"\(([0-9]+)\)([0-9]+)c")
POOL = re.compile(r"([0-9]+)p")
CLASSIFIER = re.compile(r"([0-9]+)fc")
HELP = "write (C)Kc for a conv with C maps and a KxK kernel, Pp for a PxP pooling, Nfc for the classifier"


@dataclass(frozen=True)
class Conv:
    channels: int
    kernel: int


@dataclass(frozen=True)
class Stage:
    convs: tuple[Conv, ...]  # one or more, in order
    pool: int  # the PxP pooling that closes the stage

    @property
    def channels(self) -> int:
        return self.convs[-1].channels


@dataclass(frozen=True)
class Arch:
    stages: tuple[Stage, ...]
    classes: int | None  # N of the Nfc token; None without a classifier

    def __str__(self) -> str:
        tokens = [
            tok
            for stage in self.stages
            for tok in [*(f"({c.channels}){c.kernel}c" for c in stage.convs), f"{stage.pool}p"]
        ]
        return "-".join(tokens + ([f"{self.classes}fc"] if self.classes else []))


class ArchError(ConfigError):
    """A bad ``model.arch``: the message quotes the string (a long one around the bad token
    only: ``quoted``); ``column`` and ``width`` locate the bad token inside the message, so
    that a caret line can point at it."""

    def __init__(self, arch: str, start: int, end: int, reason: str):
        shown, at, token = quoted(arch, start, end)
        length = f" ({len(arch)} characters)" if shown != arch else ""
        super().__init__(f'model.arch="{shown}"{length}: `{token}` {reason}')
        self.column, self.width = len('model.arch="') + at, max(1, len(token))

    def caret(self, indent: int = 0) -> str:
        """``^^^`` under the bad token, for a message printed after ``indent`` characters."""
        return " " * (indent + self.column) + "^" * self.width


QUOTED = 100  # characters of a layer string an error quotes; a longer one, around its bad token
AROUND = 30  # characters quoted on either side of the bad token
TOKEN = 40  # characters of the bad token itself (its start and end)


def quoted(arch: str, start: int, end: int) -> tuple[str, int, str]:
    """(what an error quotes of ``arch``, where the bad token ``arch[start:end]`` starts in it,
    the token as quoted): the whole string up to ``QUOTED`` characters; a longer one cut to the
    token and a little either side, each cut marked ``...``."""
    token = arch[start:end]
    if len(arch) <= QUOTED:
        return arch, start, token
    if len(token) > TOKEN:
        token = f"{token[: TOKEN // 2]}...{token[-(TOKEN // 2) :]}"
    before = arch[max(0, start - AROUND) : start]
    before = f"...{before}" if start > AROUND else before
    after = arch[end : end + AROUND]
    after = f"{after}..." if end + AROUND < len(arch) else after
    return before + token + after, len(before), token


def parse(arch: str) -> Arch:
    """Read the notation; :class:`ArchError` names the first token that cannot work."""
    if not isinstance(arch, str) or not arch.strip():
        raise ConfigError(
            f"model.arch must be a layer string such as (32)3c-2p-(64)3c-2p-10fc, got {excerpt(repr(arch))}"
        )
    stages, convs, classes = [], [], None
    position = stage_start = 0
    for token in arch.split("-"):
        start, end = position, position + len(token)
        position = end + 1
        if not token.strip():
            raise ArchError(arch, max(start - 1, 0), start + 1, "holds an empty layer: remove the extra `-`")
        if classes is not None:
            raise ArchError(arch, start, end, "follows the classifier: the classifier comes last")
        token = token.strip()
        if match := CONV.fullmatch(token):
            channels, kernel = int(match[1]), int(match[2])
            if channels < 1:
                raise ArchError(arch, start, end, "has no maps: C must be >= 1")
            if kernel < 1 or kernel % 2 == 0:
                raise ArchError(arch, start, end, "needs an odd kernel size (same-size convolutions): 1, 3, 5, ...")
            stage_start = start if not convs else stage_start
            convs.append(Conv(channels, kernel))
        elif match := POOL.fullmatch(token):
            if not convs:
                raise ArchError(arch, start, end, "closes a stage without a conv: put (C)Kc before each pooling")
            if int(match[1]) < 1:
                raise ArchError(arch, start, end, "needs a pooling size >= 1")
            stages.append(Stage(tuple(convs), int(match[1])))
            convs = []
        elif match := CLASSIFIER.fullmatch(token):
            if convs or not stages:
                raise ArchError(arch, start, end, "comes before the stage is closed: end each stage with Pp")
            classes = int(match[1])
            if classes < 2:
                raise ArchError(arch, start, end, "needs at least 2 classes")
        else:
            raise ArchError(arch, start, end, f"is not a layer: {HELP}")
    if convs:
        raise ArchError(arch, stage_start, len(arch), "is not closed by a pooling: end each stage with Pp")
    return Arch(tuple(stages), classes)


def check_fits(spec: Arch, image_shape, stride: int | None = None, padding: int = 0, ceil: bool = False) -> None:
    """ConfigError (one line, naming the stage and the sizes) where a conv kernel or a pooling
    window is larger than the maps it meets, before any layer is built. Maps keep their size
    through the (same-size) convs and shrink at each pooling, as the floor of the pooled size
    (``ceil``: the wavelet's, which pads odd sizes). A same-size conv pads its map, so its
    kernel may reach one cell past it (a 3x3 conv on 2x2 maps, as VGG's last stage has), no
    more: a 3x3 kernel on 1x1 maps is a 1x1 conv with 8 weights that never see a pixel."""
    height, width = int(image_shape[-2]), int(image_shape[-1])
    stages = len(spec.stages)
    for i, stage in enumerate(spec.stages, start=1):
        for conv in stage.convs:
            if conv.kernel > min(height, width) + 1:
                raise ConfigError(
                    f"model stage {i} of {stages}: its {conv.kernel}x{conv.kernel} conv kernel is larger "
                    f"than the {height}x{width} maps it meets"
                )
        pool, step = stage.pool, stride or stage.pool
        if pool > min(height, width) + 2 * padding:
            raise ConfigError(
                f"model stage {i} of {stages}: its {pool}x{pool} pooling window is larger than the "
                f"{height}x{width} maps it meets"
            )
        if ceil:
            height, width = -(-height // step), -(-width // step)
        else:
            height, width = ((n + 2 * padding - pool) // step + 1 for n in (height, width))


def shorthand(widths, kernel_size: int, pool_size: int, classes: int | None) -> str:
    """The notation of the ``widths`` / ``kernel_size`` / ``pool_size`` shorthand: one conv
    and one pooling per width."""
    tokens = [tok for width in widths for tok in (f"({width}){kernel_size}c", f"{pool_size}p")]
    return "-".join(tokens + ([f"{classes}fc"] if classes else []))
