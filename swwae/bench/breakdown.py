"""Where a training step's time goes, by kind of work: a few calls of the step under torch's
profiler, each op's own time (on a GPU, the kernels it launched) summed by the kind of work it
belongs to (``KINDS``), and set against the step's time.

Why: a step far below the chip's matrix rate either keeps the device waiting for the host (the
kinds add up to a small share of the step: fewer, larger kernels help, as a bigger batch,
compile or CUDA graphs give them) or spends its kernels' time outside the matrix units (the
kinds say where). The benchmarks' throughput alone cannot tell the two apart, and a GPU is lent
for a few minutes at a time. Where a few kernels make the whole call (pool + unpool), their time
by kernel says which of them to work on (``kernel_times``, ``by_kernel``).

Pure torch (no Lightning, no Hydra).
"""

from __future__ import annotations

import collections
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from swwae.bench.harness import quiet_stderr, synchronize

# (kind, words of an op's name, lower case and without underscores: "batchnorm" names both
# aten::native_batch_norm and the backward's NativeBatchNormBackward0). An op's kind is the first
# kind that one of its names gives, the op's own first and then those of the ops around it,
# innermost first: a copy inside Adam's step is the optimiser's, a multiplication inside the
# soft pool's backward is pooling's. Ops that none names count as OTHER. Kinds are ops' kinds,
# not modules': the baselines that pool by convolution (strided, wavelet) count as convolution.
KINDS = (
    ("convolution", ("conv",)),
    ("matrix product", ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "matmul")),
    ("pooling and unpooling", ("pool", "splat", "upsample")),
    ("normalisation", ("batchnorm", "layernorm", "groupnorm")),
    ("activation and dropout", ("relu", "threshold", "clampmin", "sigmoid", "tanh", "dropout", "bernoulli")),
    ("loss", ("mseloss", "nllloss", "logsoftmax", "crossentropy")),
    ("optimiser", ("optimizer.", "adam", "foreach")),
)
OTHER = "other (elementwise, copies, reductions)"
EVALUATE = "autograd::engine::evaluate_function: "  # how the backward records an autograd node
ORDER = (*(kind for kind, _ in KINDS), OTHER)  # the tables' rows
UNIT = {"cuda": "kernel time", "cpu": "ops' own time"}  # what an op's own time is, by device
IDLE = {"cuda": "the GPU idle (waiting for the host)", "cpu": "outside torch's ops (Python, hooks)"}


def kind_of(names: list[str]) -> tuple[str, str]:
    """(kind, the name that gave it) of an op whose own name and its surrounding ops' names,
    innermost first, are ``names``; an op of no kind is OTHER under its own name."""
    for name in names:
        lowered = name.lower().replace("_", "")
        for kind, words in KINDS:
            if any(word in lowered for word in words):
                return kind, name.removeprefix(EVALUATE)
    return OTHER, names[0].removeprefix(EVALUATE)


@dataclass
class Breakdown:
    """A profiled step, the mean of ``calls``: ``seconds[kind]`` of its ops' own time (kernel time
    on a GPU), ``top[kind]`` the names that gave the kind to the ops with the most of it,
    ``total`` the time of all of them (on a GPU every kernel and copy, whether or not an op
    launched it), on ``device`` ("cuda" or "cpu"); ``wall`` the seconds of a profiled call."""

    seconds: dict[str, float]
    top: dict[str, list[str]]
    total: float
    device: str
    calls: int
    wall: float

    def whole(self, step_seconds: float) -> float:
        """The step that shares are of. On a GPU ``step_seconds``, the step measured without the
        profiler: kernels take as long under it, but the host's time grows (it records every
        op), and the GPU's wait for the host is what a breakdown is for. On the CPU the ops' own
        time grows with the step's, so the profiled step's."""
        return step_seconds if self.device == "cuda" else self.wall

    def idle(self, step_seconds: float) -> float:
        """The part of the step when the device (on the CPU, torch's ops) did nothing."""
        return max(0.0, self.whole(step_seconds) - self.total)

    def table(self, step_seconds: float) -> list[str]:
        """Markdown rows: each kind's milliseconds and share of the step (``whole``), the kinds in
        the order of ``KINDS``; then the rest of the step (``idle``), the profiled and the
        unprofiled step."""
        whole = self.whole(step_seconds)
        head = f"| kind of work | ms a step ({UNIT[self.device]}) | share of the step | ops with the most |"
        rows = [head, "|---|---:|---:|---|"]
        for kind in ORDER:
            if kind in self.seconds:
                seconds = self.seconds[kind]
                rows.append(f"| {kind} | {seconds * 1e3:.3f} | {seconds / whole:.1%} | {', '.join(self.top[kind])} |")
        unattributed = self.total - sum(self.seconds.values())
        if unattributed > 0.001 * self.total:
            outside = f"{unattributed * 1e3:.3f} | {unattributed / whole:.1%}"
            rows.append(f"| kernels launched outside any op | {outside} | |")
        rest = self.idle(step_seconds)
        rows.append(f"| {IDLE[self.device]} | {rest * 1e3:.3f} | {rest / whole:.1%} | |")
        rows.append(f"| the step, profiled (mean) | {self.wall * 1e3:.3f} | {self.wall / whole:.1%} | |")
        rows.append(f"| the step, unprofiled (median) | {step_seconds * 1e3:.3f} | {step_seconds / whole:.1%} | |")
        return rows


def side_by_side(steps: dict[str, tuple[Breakdown, float]], label: str) -> list[str]:
    """Markdown rows comparing steps (name -> (its breakdown, its unprofiled seconds)), a column
    each: every kind's milliseconds, then the device idle (on the CPU: outside torch's ops) and
    the whole step (``Breakdown.idle``, ``Breakdown.whole``); ``label`` heads the first column."""
    first = next(iter(steps.values()))[0]
    rows = [f"| {label} (ms a step, {UNIT[first.device]}) | {' | '.join(steps)} |", "|---|" + "---:|" * len(steps)]
    present = {kind for breakdown, _ in steps.values() for kind in breakdown.seconds}
    for kind in ORDER:
        if kind in present:
            cells = [f"{breakdown.seconds.get(kind, 0.0) * 1e3:.3f}" for breakdown, _ in steps.values()]
            rows.append(f"| {kind} | {' | '.join(cells)} |")
    idle = [b.idle(seconds) * 1e3 for b, seconds in steps.values()]
    rows.append(f"| {IDLE[first.device]} | {' | '.join(f'{ms:.3f}' for ms in idle)} |")
    rows.append(f"| the step | {' | '.join(f'{b.whole(seconds) * 1e3:.3f}' for b, seconds in steps.values())} |")
    return rows


def _names(event) -> list[str]:
    names = []
    while event is not None:
        names.append(event.name)
        event = event.cpu_parent
    return names


def _kernel_seconds(event) -> float:
    """The seconds of a GPU event: a kernel's or a copy's; none for a ``record_function`` range's
    copy on the GPU's timeline (a ``gpu_user_annotation``, such as Adam's ``Optimizer.step``),
    which spans kernels counted already (torch's own tables leave them out: pytorch issue 130730)."""
    return 0.0 if getattr(event, "is_user_annotation", False) else event.device_time_total / 1e6


def _profiled(step: Callable[[], object], device, calls: int):
    """(the profiler's events, the seconds of a profiled call, whether on CUDA) of ``calls`` calls
    of ``step``, the profiler's own logging silenced."""
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.device(device).type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    synchronize(device)
    with quiet_stderr():  # the profiler's C++ side logs its start and stop there
        with profile(activities=activities) as prof:
            start = time.perf_counter()
            for _ in range(calls):
                step()
            synchronize(device)
            wall = (time.perf_counter() - start) / calls
    return prof.events(), wall, cuda


def step_breakdown(step: Callable[[], object], device, calls: int = 3, top: int = 3) -> Breakdown:
    """Profile ``calls`` calls of ``step`` on ``device`` and sum their ops' own time by kind, per
    call (see the module's docstring). Call it after the step's warm-up: a first call's one-off
    work (cuDNN's autotuning, compilation) would count."""
    from torch.autograd import DeviceType

    events, wall, cuda = _profiled(step, device, calls)
    seconds: collections.Counter = collections.Counter()
    by_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    total = 0.0
    for event in events:
        if event.device_type != DeviceType.CPU:  # a kernel or a copy on the GPU, or a range's copy
            total += _kernel_seconds(event) / calls
            continue
        own = (event.self_device_time_total if cuda else event.self_cpu_time_total) / 1e6 / calls
        if own <= 0:
            continue
        kind, name = kind_of(_names(event))
        seconds[kind] += own
        by_op[kind][name] += own
        total += 0 if cuda else own
    return Breakdown(
        seconds=dict(seconds),
        top={kind: [name for name, _ in ops.most_common(top)] for kind, ops in by_op.items()},
        total=total,
        device="cuda" if cuda else "cpu",
        calls=calls,
        wall=wall,
    )


# by kernel: where a few kernels share a call (pool + unpool), which of them takes its time


def short_kernel_name(name: str) -> str:
    """A CUDA kernel's name as a table can hold it: its own name without namespaces, template
    arguments and parameters, and the functor it runs where the template names one (``void
    at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>(...)`` ->
    ``vectorized_elementwise_kernel FillFunctor``); other names (Triton's kernels, copies) stay."""
    if not name.startswith("void "):
        return name
    text = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    own = re.split(r"[<(]", text, maxsplit=1)[0].split("::")[-1] or text
    functors = re.findall(r"\w*Functor\w*", text.partition("<")[2])  # the innermost last
    return f"{own} {functors[-1]}" if functors else own


def kernel_times(step: Callable[[], object], device, calls: int = 3) -> dict[str, float]:
    """Seconds a call of ``step`` spends in each kernel, by ``short_kernel_name`` (on the CPU: in
    each op's own time, by the op's name), largest first. Call it after the step's warm-up."""
    from torch.autograd import DeviceType

    events, _, cuda = _profiled(step, device, calls)
    seconds: collections.Counter = collections.Counter()
    for event in events:
        if cuda and event.device_type != DeviceType.CPU:
            if kernel := _kernel_seconds(event):
                seconds[short_kernel_name(event.name)] += kernel / calls
        elif not cuda and event.self_cpu_time_total > 0:
            seconds[event.name.removeprefix(EVALUATE)] += event.self_cpu_time_total / 1e6 / calls
    return dict(seconds.most_common())


def by_kernel(times: dict[str, dict[str, float]], device, top: int = 8) -> list[str]:
    """Markdown rows comparing calls (name -> its ``kernel_times``), a column each: the ``top``
    kernels (on the CPU, ops) that take the most time in any of them, the rest, and all."""
    unit = UNIT[torch.device(device).type]
    ranked = sorted(
        {k for t in times.values() for k in t}, key=lambda k: (-max(t.get(k, 0.0) for t in times.values()), k)
    )
    shown, rest = ranked[:top], ranked[top:]
    what = "kernel" if torch.device(device).type == "cuda" else "op"

    def row(label: str, kernels: list[str]) -> str:  # blank where a call ran none of ``kernels``
        ran = [[t[k] for k in kernels if k in t] for t in times.values()]
        cells = (f"{sum(seconds) * 1e3:.3f}" if seconds else "" for seconds in ran)
        return f"| {label} | {' | '.join(cells)} |"

    rows = [f"| {what} (ms a call, {unit}) | {' | '.join(times)} |", "|---|" + "---:|" * len(times)]
    rows += [row(k, [k]) for k in shown]
    if rest:
        rows.append(row(f"the other {len(rest)}", rest))
    rows.append(row(f"all ({unit})", ranked))
    return rows
