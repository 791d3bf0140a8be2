"""Training step (forward, backward, Adam step): SWWAE hard and soft against the same network
built on native max (un)pooling, at MNIST and CIFAR-10 shapes; time and peak memory.

    python scripts/bench_training.py [--repeats 20] [--batch 128] [--widths 32 64] [--shapes mnist cifar10]
                                     [--device cpu] [--precision 32-true] [--loss-checks] [--profile]
                                     [--channels-last] [--precision-twin bf16-mixed]

``native`` is the very network of ``swwae_hard`` (same convs, same weights, same losses:
``swwae.loss.swwae_loss``) whose pools are swapped for ``nn.MaxPool2d(return_indices=True)``
and whose unpools for ``nn.MaxUnpool2d``. The variants run interleaved in one process
(round-robin), so machine noise hits them alike; the table gives medians and ratios to
native: the ratio of the medians, and the median of the ratios of steps run back to back
(targets, docs/architecture.md 5: hard <= 1.05x, soft <= 1.5x; hard peak memory <= 1.1x). Peak
memory is the high-water mark of torch's CPU allocator during one step (profiler memory
events, allocation by allocation), or ``torch.cuda.max_memory_allocated`` on a GPU; timing
and memory come from ``swwae.bench.harness``, shared by every benchmark. The page faults a
step count memory fetched afresh from the OS. As in ``train.py`` (``keep_freed_memory:
true``), glibc keeps freed memory for the next step; with ``--no-keep-freed-memory`` it
hands the activations back at the end of every step, as it does by default, and every step
faults them in again.

``--device cuda`` runs it on a GPU (times include its queued work: the harness synchronises
after each step); ``--precision bf16-mixed`` or ``16-mixed`` trains under autocast, as
Lightning's precisions do (``swwae.bench.steps``). ``--loss-checks`` adds a table: the hard
step as train.py takes it, its loss terms watched on the device (``LossWatch``, read back
only every ``log_every_n_steps`` steps), against the same step reading its values back every
step as it did before (``bool(isfinite(term))`` per term, the progress bar's ``loss.item()``,
``if labelled.any()``): on a CPU these cost next to nothing, on a GPU each is a host sync.
``--channels-last`` adds each variant's twin with its weights and batch in (N, H, W, C) memory (the
job's ``channels_last=true``), interleaved with the rest, and a table of each twin against its
plain variant: whether the setting pays, variant by variant, on this device. ``--precision-twin
bf16-mixed`` does the same for a precision: each variant's twin in bf16-mixed against it in
``--precision``'s (whether autocast pays on this device; on a CPU it takes bfloat16 instructions,
AVX512-BF16 or AMX).
``--profile`` adds, for each shape, where each variant's step goes, side by side
(``swwae.bench.breakdown``): its kernels' time by kind of work, and the GPU's wait for the host;
where the soft step's time beyond native goes.

``--compile`` measures ``compile=true`` instead: each variant eager against its twin
compiled in place (``swwae.training.run``, the same weights), interleaved; the compile
time is the first compiled step, caches off (what a fresh run pays), and the table gives
the compiled/eager ratio of the steps after it. ``--compile aot_eager`` names another
backend.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import argparse
import itertools
from typing import NamedTuple

import torch
from torch import nn

from swwae.bench.breakdown import side_by_side, step_breakdown
from swwae.bench.harness import peak_memory, set_threads, time_interleaved, timed
from swwae.bench.steps import PRECISIONS, training_step
from swwae.loss import loss_weights, swwae_loss
from swwae.model import SWWAE
from swwae.training.nonfinite import LossWatch
from swwae.training.process import compile_backend, keep_freed_memory

SHAPES = {"mnist": (1, 28, 28), "cifar10": (3, 32, 32)}
LR = 2e-3  # configs/model/swwae_hard.yaml
VARIANTS = ("native", "hard", "soft")
TARGETS = {"hard": 1.05, "soft": 1.5}
MEMORY_TARGETS = {"hard": 1.1}

# helpers


class NativeWhere:
    """The where of nn.MaxPool2d(return_indices=True): indices, undone by nn.MaxUnpool2d."""

    def __init__(self, indices, size, unpool: nn.MaxUnpool2d):
        self.indices, self.size, self._unpool = indices, size, unpool

    def unpool(self, v):
        return self._unpool(v, self.indices, output_size=self.size)


class NativeMaxPool(nn.Module):
    """nn.MaxPool2d + nn.MaxUnpool2d behind the interface of ``swwae.pooling.WhatWherePool``
    (``what, where = pool(x)``, ``Unpool`` calls ``where.unpool(v)``), same geometry."""

    def __init__(self, like):
        super().__init__()
        g = like.geometry
        self.geometry, self.input_size = g, like.input_size
        self.max_pool = nn.MaxPool2d(g.kernel, g.stride, g.padding, return_indices=True)
        self.max_unpool = nn.MaxUnpool2d(g.kernel, g.stride, g.padding)

    def forward(self, x):
        self.input_size = tuple(x.shape[-2:])
        what, indices = self.max_pool(x)
        return what, NativeWhere(indices, x.shape[-2:], self.max_unpool)


def make_net(variant: str, image_shape, widths) -> SWWAE:
    """The swwae_hard / swwae_soft network (configs/model defaults), or its native twin, in
    plain torch. Same seed: the same initial weights in every variant."""
    torch.manual_seed(0)
    net = SWWAE(image_shape=image_shape, widths=list(widths), pool_mode="soft" if variant == "soft" else "hard")
    if variant == "native":
        for i, pool in enumerate(net.pools):
            net.pools[i] = NativeMaxPool(pool)  # net.unpools[i] calls where.unpool(v)
    return net.train()


def make_step(net: SWWAE, x, y, precision: str = "32-true", check=None):
    """One training step, as Lightning's automatic optimisation does it (``swwae.bench.steps``),
    on the loss train.py optimises (``swwae_loss``, the default weights); ``check(terms, y)``, if
    given, sees the loss terms of every step."""

    def loss():
        terms = swwae_loss(net(x), x, y, **loss_weights({}))
        if check is not None:
            check(terms, y)
        return terms["loss"]

    return training_step(loss, net.parameters(), lr=LR, device=x.device, precision=precision)


def reads_back_every_step(terms, y) -> None:
    """What a training step read back from the device before the loss watch: whether any
    sample was labelled (loss.py's ``if``), each term's finiteness, the progress bar's loss."""
    bool((y >= 0).any())
    for value in terms.values():
        bool(torch.isfinite(value))
    terms["loss"].item()


def watched(every: int = 10):
    """The loss watch of train.py's module, read back every ``every`` steps (log_every_n_steps)."""
    watch, steps = LossWatch(), itertools.count()

    def check(terms, y) -> None:
        step = next(steps)
        watch.record(terms, 0, step)
        if (step + 1) % every == 0:
            watch.check()

    return check


def bench_loss_checks(args, device) -> list[str]:
    """The hard step at MNIST shapes with the loss watch vs reading back every step."""
    torch.manual_seed(1)
    x = torch.rand(args.batch, *SHAPES["mnist"], device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    checks = {"watched": watched(), "read every step": reads_back_every_step}
    steps = {
        name: make_step(make_net("hard", SHAPES["mnist"], args.widths).to(device), x, y, args.precision, check)
        for name, check in checks.items()
    }
    times = time_interleaved(steps, args.repeats, warmup=args.warmup, device=device)
    return [
        f"| {name} | {times.median(name) * 1e3:.2f} | {times.paired_ratio(name, 'watched'):.3f}x |" for name in steps
    ]


class ShapeResult(NamedTuple):
    rows: list[str]  # the main table's, one a variant
    ok: bool  # every target met
    profiles: dict  # variant -> (its breakdown, its median seconds), with --profile
    twins: dict[str, list[str]]  # twin kind -> its table's rows, with --channels-last, --precision-twin


LAST = "channels_last"


def twin_kinds(args) -> dict[str, str]:
    """The twins asked for, each kind with what its twin is measured against: ``channels_last``
    (weights and batch in (N, H, W, C) memory, the job's setting) against the plain layout, another
    precision (``--precision-twin``) against ``--precision``."""
    kinds = {LAST: "plain"} if args.channels_last else {}
    return kinds | ({args.precision_twin: args.precision} if args.precision_twin else {})


def twin_step(kind: str, variant: str, image_shape, x, y, args, device):
    """``variant``'s step again, as its twin of ``kind`` (``twin_kinds``)."""
    net = make_net(variant, image_shape, args.widths).to(device)
    if kind != LAST:
        return make_step(net, x, y, kind)
    layout = torch.channels_last
    return make_step(net.to(memory_format=layout), x.contiguous(memory_format=layout), y, args.precision)


def bench_shape(name: str, args, device) -> ShapeResult:
    image_shape = SHAPES[name]
    torch.manual_seed(1)
    x = torch.rand(args.batch, *image_shape, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    steps = {
        v: make_step(make_net(v, image_shape, args.widths).to(device), x, y, args.precision) for v in args.variants
    }
    kinds = twin_kinds(args)
    twins = {f"{v} {kind}": twin_step(kind, v, image_shape, x, y, args, device) for kind in kinds for v in steps}
    times = time_interleaved(steps | twins, args.repeats, warmup=args.warmup, device=device)
    # ratio of the medians, and the median of the ratios of steps run back to back (robust to drifts)
    paired = {v: times.paired_ratio(v, "native") for v in steps}
    memory = {v: peak_memory(step, device) for v, step in steps.items()}
    profiles = {v: (step_breakdown(step, device), times.median(v)) for v, step in steps.items()} if args.profile else {}
    rows, ok = [], True
    label = f"{name} {'x'.join(map(str, image_shape))}"
    for v in steps:
        ratio, mem_ratio = times.ratio_of_medians(v, "native"), memory[v] / memory["native"]
        target, mem_target = TARGETS.get(v), MEMORY_TARGETS.get(v)
        ok &= (target is None or min(ratio, paired[v]) <= target) and (mem_target is None or mem_ratio <= mem_target)
        spread = times.quartiles(v)
        rows.append(
            f"| {label} | {v} | {times.median(v) * 1e3:.1f} | {spread[0] * 1e3:.0f}-{spread[2] * 1e3:.0f} | "
            f"{ratio:.2f}x | {paired[v]:.2f}x | {'' if target is None else f'<= {target}x'} | "
            f"{memory[v] / 2**20:.1f} | {mem_ratio:.2f}x | {'' if mem_target is None else f'<= {mem_target}x'} | "
            f"{times.median_faults(v):.0f} |"
        )
    twin_rows = {
        kind: [
            f"| {label} | {v} | {times.median(v) * 1e3:.1f} | {times.median(f'{v} {kind}') * 1e3:.1f} | "
            f"{times.paired_ratio(f'{v} {kind}', v):.2f}x |"
            for v in steps
        ]
        for kind in kinds
    }
    return ShapeResult(rows, ok, profiles, twin_rows)


def bench_compile(name: str, args, device) -> list[str]:
    """Rows of the compiled/eager table for one image shape."""
    import torch._inductor.config

    torch._inductor.config.force_disable_caches = True  # time a cold compile, as a fresh run pays it
    image_shape = SHAPES[name]
    torch.manual_seed(1)
    x = torch.rand(args.batch, *image_shape, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    rows, label = [], f"{name} {'x'.join(map(str, image_shape))}"
    for v in (v for v in args.variants if v != "native"):
        eager = make_step(make_net(v, image_shape, args.widths).to(device), x, y)
        torch._dynamo.reset()  # a cold start: graphs compiled for another variant or shape are not reused
        net = make_net(v, image_shape, args.widths).to(device)
        net.compile(backend=compile_backend(args.compile), dynamic=False)  # as compile=true does it
        compiled = make_step(net, x, y)
        compile_s, _ = timed(compiled, device)  # forward and backward graphs compile on the first step
        times = time_interleaved(
            {"eager": eager, "compiled": compiled}, args.repeats, warmup=args.warmup, device=device
        )
        rows.append(
            f"| {label} | {v} | {args.compile} | {compile_s:.1f} | {times.median('eager') * 1e3:.1f} | "
            f"{times.median('compiled') * 1e3:.1f} | {times.ratio_of_medians('compiled', 'eager'):.2f}x | "
            f"{times.paired_ratio('compiled', 'eager'):.2f}x |"
        )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--widths", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["mnist", "cifar10"])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default: cpu)")
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="32-true",
        help="as trainer.precision: autocast for the mixed ones (default: 32-true)",
    )
    parser.add_argument(
        "--loss-checks", action="store_true", help="also time the loss watch against reading the loss back every step"
    )
    parser.add_argument("--profile", action="store_true", help="also where each variant's step goes, by kind of work")
    parser.add_argument("--channels-last", action="store_true", help="also each variant in channels_last (vs plain)")
    parser.add_argument(
        "--precision-twin",
        choices=PRECISIONS,
        default=None,
        help="also each variant in this precision (vs --precision's), e.g. bf16-mixed",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    parser.add_argument(
        "--keep-freed-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="glibc keeps freed memory for the next step, as train.py has it (default: yes)",
    )
    parser.add_argument(
        "--compile",
        nargs="?",
        const="inductor",
        default=None,
        metavar="BACKEND",
        help="compiled vs eager steps instead (backend: inductor unless named)",
    )
    args = parser.parse_args(argv)
    if args.precision_twin == args.precision:
        parser.error(f"--precision-twin {args.precision_twin} is --precision's: name another")
    set_threads(args.threads)
    kept = args.keep_freed_memory and keep_freed_memory()
    if "native" not in args.variants:
        args.variants = ["native", *args.variants]
    device = torch.device(args.device)
    print(
        f"training step (forward, backward, Adam step), batch {args.batch}, widths {args.widths}, on {device}"
        f"{'' if args.precision == '32-true' else f' in {args.precision}'}, "
        f"torch {torch.__version__}, threads: {torch.get_num_threads()}, {args.repeats} interleaved repeats"
        f"{', glibc keeps freed memory' if kept else ', glibc default (hands freed memory back)'}\n"
    )
    if args.compile:
        print(
            "| shapes | variant | backend | compile s (first step) | eager ms | compiled ms | ratio of medians | "
            "paired ratio |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for name in args.shapes:
            print("\n".join(bench_compile(name, args, device)), flush=True)
        return 0
    print(
        "| shapes | variant | median ms | IQR ms | ratio of medians | paired ratio | target | peak MiB | "
        "memory ratio | target | page faults a step |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    results = {}
    for name in args.shapes:
        results[name] = bench_shape(name, args, device)
        print("\n".join(results[name].rows), flush=True)
    print("\nall targets met" if all(r.ok for r in results.values()) else "\nsome targets missed (see ratios above)")
    for kind, against in twin_kinds(args).items():
        what = "weights and batch in (N, H, W, C) memory" if kind == LAST else f"in {kind}"
        print(f"\n{kind}: each variant's step, {what}, against the {against} one:\n")
        print(f"| shapes | variant | {against} median ms | {kind} median ms | paired ratio |\n|---|---|---|---|---|")
        print("\n".join(row for r in results.values() for row in r.twins[kind]))
    for name, steps in ((name, r.profiles) for name, r in results.items()):
        if steps:
            calls = next(iter(steps.values()))[0].calls
            print(f"\nwhere each variant's step goes, {name} ({calls} steps profiled):\n")
            print("\n".join(side_by_side(steps, "kind of work")))
    if args.loss_checks:
        print("\nnon-finite loss checks, hard step at mnist shapes (paired ratio to the watched step):\n")
        print("| loss check | median ms | ratio |\n|---|---|---|")
        print("\n".join(bench_loss_checks(args, device)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
