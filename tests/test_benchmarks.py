"""The benchmark scripts keep working: each main() once, on tiny sizes. No timing asserts
(the machine is shared and noisy: DESIGN 4); the numbers are for people to read."""

from __future__ import annotations

import pytest
import torch

from scripts import bench_epoch, bench_pooling, bench_scaling, bench_training

TINY_RUN = ["model.widths=[4,8]", "+trainer.limit_val_batches=1", "+trainer.num_sanity_val_steps=0"]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny ops on 2 shared cores: one thread is many times faster (no waits at OpenMP barriers)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_bench_pooling(capsys):
    assert bench_pooling.main(["--repeats", "1", "--batch", "2", "--channels", "2", "--size", "8"]) == 0
    out = capsys.readouterr().out
    assert "| 2x2 stride 2 | hard |" in out and "| 3x3 stride 2 | soft |" in out
    assert bench_pooling.main(["--repeats", "1", "--batch", "2", "--channels", "2", "--size", "8",
                               "--cases", "4x4s4", "--no-keep-freed-memory"]) == 0
    out = capsys.readouterr().out
    assert "| 4x4 stride 4 | soft |" in out and "2x2" not in out and "glibc default" in out
    with pytest.raises(SystemExit):  # argparse: one line naming the expected form
        bench_pooling.main(["--cases", "3x2s2"])
    assert "KxKsS" in capsys.readouterr().err


def test_bench_training(capsys):
    argv = ["--repeats", "2", "--warmup", "0", "--batch", "4", "--widths", "4", "8"]
    assert bench_training.main(argv) == 0
    out = capsys.readouterr().out
    for shapes in ("mnist 1x28x28", "cifar10 3x32x32"):
        for variant in ("native", "hard", "soft"):
            assert f"| {shapes} | {variant} |" in out


def test_native_twin_is_the_same_network_on_native_pooling():
    hard = bench_training.make_module("hard", (1, 28, 28), [4, 8])
    native = bench_training.make_module("native", (1, 28, 28), [4, 8])
    assert [type(p).__name__ for p in native.net.pools] == ["NativeMaxPool"] * 2
    x = torch.rand(3, 1, 28, 28)
    # no ties in random data: max unpooling and the adjoint agree, so the two nets agree
    torch.testing.assert_close(native(x).recon, hard(x).recon)


def test_bench_epoch(capsys):
    argv = ["--epochs", "2", "--batch", "16", "--train-size", "32", *TINY_RUN]
    assert bench_epoch.main(argv) == 0
    out = capsys.readouterr().out
    assert "| **whole epoch** |" in out and "reconstruction images:" in out and "32 training images" in out


def test_bench_scaling(capsys):
    argv = ["--sizes", "16", "32", "--widths", "4", "--base-width", "4", "--epochs", "2", "--batch", "16", *TINY_RUN[1:]]
    assert bench_scaling.main(argv) == 0
    out = capsys.readouterr().out
    assert "linear fit, epoch:" in out and "| [4, 8] |" in out and "default run" in out
