"""The SWWAE network (docs/architecture.md 4.2): stages, bound unpooling, outputs, and bad configs."""

import pytest
import torch

from swwae.errors import ConfigError
from swwae.model import SWWAE
from swwae.pooling import MODES


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("image_shape", [(1, 28, 28), (3, 32, 32)])
def test_every_mode_reconstructs_the_exact_input_shape(mode, image_shape):
    # 28 -> 14 -> 7 -> 3 (odd sizes on the way) must come back to 28 exactly
    net = SWWAE(image_shape=image_shape, widths=[4, 6, 8], pool_mode=mode)
    x = torch.rand(2, *image_shape)
    out = net(x)
    assert out.recon.shape == x.shape
    assert 0 <= out.recon.min() and out.recon.max() <= 1
    assert len(out.whats) == len(out.wheres) == len(out.decoded) == 3
    for decoded, target in out.middle_pairs:
        assert decoded.shape == target.shape
    assert out.logits.shape == (2, 10)
    assert (out.wheres[0] is None) == (mode not in ("hard", "soft"))


def test_input_the_network_cannot_take_is_one_line_and_a_classifier_free_one_takes_any_size():
    net = SWWAE(image_shape=(1, 28, 28), widths=[4, 8], num_classes=10)
    for bad in (torch.rand(1, 3, 28, 28), torch.rand(1, 28, 28), torch.zeros(1, 1, 28, 28, dtype=torch.uint8)):
        with pytest.raises(
            ValueError, match=r"^this network takes float \(N, 1, H, W\) images \(built for 1 x 28 x 28"
        ):
            net(bad)
    with pytest.raises(ValueError, match=r"^this network's classifier takes the 1 x 28 x 28 images it was built for"):
        net(torch.rand(2, 1, 20, 20))
    assert net.encode(torch.rand(2, 1, 20, 20))[0][-1].shape == (2, 8, 5, 5)  # the encoder takes any size
    free = SWWAE(image_shape=(1, 28, 28), widths=[4, 8], num_classes=None)
    assert free(torch.rand(2, 1, 20, 20)).recon.shape == (2, 1, 20, 20)


def test_each_decoder_stage_unpools_with_its_own_encoder_pool():
    net = SWWAE(widths=[4, 8], pool_size=2)
    assert all(unpool.pool is pool for unpool, pool in zip(net.unpools, net.pools))
    assert [p.input_size for p in net.pools] == [(28, 28), (14, 14)]  # from the dry run


def test_the_where_carries_information_the_decoder_uses():
    torch.manual_seed(0)
    net = SWWAE(widths=[8, 8]).eval()
    x = torch.rand(4, 1, 28, 28)
    with torch.no_grad():
        recon = net(x).recon
    assert not torch.allclose(recon, net.reconstruct_without_where(x))


def test_no_classifier_head_without_classes():
    out = SWWAE(widths=[4], num_classes=None)(torch.rand(1, 1, 28, 28))
    assert out.logits is None


def test_gradients_reach_every_parameter_through_both_paths():
    net = SWWAE(widths=[4, 8], pool_mode="soft", beta=10.0)
    out = net(torch.rand(3, 1, 28, 28))
    (out.recon.square().mean() + out.logits.logsumexp(1).mean()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(widths=[]), "widths"),
        (dict(pool_mode="soft", beta=0.0), "beta"),
        (dict(pool_mode="nearest"), "pool_mode"),
        (dict(pool_size=7, widths=[4, 4, 4]), "model stage 2 of 3: its 7x7 pooling window is larger than the 4x4 maps"),
        (dict(kernel_size=41), "model stage 1 of 2: its 41x41 conv kernel is larger than the 28x28 maps it meets"),
        (dict(arch="(8)5c-2p-(8)17c-2p"), "model stage 2 of 2: its 17x17 conv kernel is larger than the 14x14 maps"),
        (dict(widths=[4, 4, 4, 4, 4]), "model stage 5 of 5: its 3x3 conv kernel is larger than the 1x1 maps"),
        (dict(pool_mode="soft", beta=float("inf")), "model.beta=inf is not allowed: must be a finite number"),
        (dict(pool_mode="soft", beta=float("nan")), "model.beta=nan is not allowed: must be a finite number"),
        (dict(arch="(１６)５c-2p"), "is not a layer"),
        (dict(kernel_size=4), "odd"),
        (dict(pool_mode="wavelet", pool_size=3), "power-of-two"),
        (dict(nonlinearity="swish"), "nonlinearity"),
        (dict(image_shape=(0, 28, 28)), r"image_shape must be \(channels, height, width\), positive ints"),
        (dict(pixel_mean=[0.1, 0.2]), r"one a channel \(1\), got \[0.1, 0.2\]"),
        (dict(pixel_mean=33.0), r"pixel_mean must be one value in \[0, 1\]"),  # a mean on the 0-255 scale
    ],
)
def test_bad_configs_are_one_clear_error(kwargs, message):
    with pytest.raises(ConfigError, match=message) as err:
        SWWAE(**kwargs)
    assert "\n" not in str(err.value)
