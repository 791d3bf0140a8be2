"""The paper's layer notation (``model.arch``): parsing, the network it builds, and the
errors for strings that cannot work."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from helpers.cli import command_here
from swwae.arch import ArchError, parse, shorthand
from swwae.errors import ConfigError
from swwae.model import SWWAE, convs
from swwae.training.module import SWWAEModule
from swwae.training.run import train

STL10 = "(64)3c-4p-(64)3c-3p-(128)3c-(128)3c-2p-(256)3c-(256)3c-(256)3c-(512)3c-(512)3c-(512)3c-2p-10fc"


@pytest.mark.parametrize("arch", ["(16)5c-(32)3c-2p", "(64)5c-2p-(64)3c-2p-(64)3c-2p-10fc", STL10])
def test_the_papers_strings_read_back_as_written(arch):
    assert str(parse(arch)) == arch


def test_stages_convs_pools_and_classifier():
    spec = parse("(16)5c-(32)3c-4p-(8)1c-2p-10fc")
    assert [[(c.channels, c.kernel) for c in s.convs] for s in spec.stages] == [[(16, 5), (32, 3)], [(8, 1)]]
    assert [s.pool for s in spec.stages] == [4, 2] and spec.classes == 10
    assert parse("(16)5c-2p").classes is None


def test_the_shorthand_is_one_conv_and_one_pool_per_width():
    assert shorthand([32, 64], 3, 2, 10) == "(32)3c-2p-(64)3c-2p-10fc"
    assert SWWAE(widths=[32, 64]).arch == "(32)3c-2p-(64)3c-2p-10fc"
    assert SWWAE(widths=[8], num_classes=None, pool_size=4).arch == "(8)3c-4p"


@pytest.mark.parametrize(
    "arch, token, reason",
    [
        ("(16)5c-(32)5x-2p", "(32)5x", "is not a layer: write (C)Kc"),
        ("(16)4c-2p", "(16)4c", "needs an odd kernel size"),
        ("2p-(16)3c-2p", "2p", "closes a stage without a conv"),
        ("(16)3c-2p-(8)3c", "(8)3c", "is not closed by a pooling"),
        ("(16)3c-2p-10fc-2p", "2p", "follows the classifier"),
        ("(16)3c--2p", "--", "holds an empty layer"),
        ("(0)3c-2p", "(0)3c", "has no maps"),
        ("(16)3c-0p", "0p", "needs a pooling size >= 1"),
    ],
)
def test_a_bad_string_names_the_token_and_a_caret_points_at_it(arch, token, reason):
    with pytest.raises(ArchError) as err:
        parse(arch)
    message = str(err.value)
    assert message.startswith(f'model.arch="{arch}": `{token}` {reason}') and "\n" not in message
    line = "error: " + message
    caret = err.value.caret(indent=len("error: "))
    start = caret.index("^")
    assert line[start : start + len(caret.strip())] == token[: len(caret.strip())] and set(caret.strip()) == {"^"}


def test_each_decoder_stage_mirrors_its_encoder_stage():
    net = SWWAE(image_shape=(3, 32, 32), arch="(16)5c-(32)3c-2p-(8)1c-2p-10fc", batch_norm=True)
    encoder = [(c.in_channels, c.out_channels, c.kernel_size[0]) for c in convs(net.encoders[0])]
    decoder = [(c.in_channels, c.out_channels, c.kernel_size[0]) for c in convs(net.decoders[0])]
    assert encoder == [(3, 16, 5), (16, 32, 3)] and decoder == [(32, 16, 3), (16, 3, 5)]
    assert [(c.in_channels, c.out_channels) for c in convs(net.decoders[1])] == [(8, 32)]
    assert isinstance(net.decoders[0][-1], nn.Sigmoid) and not isinstance(net.decoders[0][-2], nn.BatchNorm2d)
    assert sum(isinstance(m, nn.BatchNorm2d) for m in net.decoders[0]) == 1  # the inner conv only
    assert net.pools[0].geometry.kernel == (2, 2) and net.top_shape == (8, 8, 8)
    out = net(torch.rand(2, 3, 32, 32))
    assert out.recon.shape == (2, 3, 32, 32) and out.logits.shape == (2, 10)
    assert [tuple(d.shape) for d, _ in out.middle_pairs] == [(2, 32, 16, 16)]  # at the stage boundary


def test_per_stage_pool_sizes_and_the_stl10_network_on_96_pixel_images():
    net = SWWAE(image_shape=(3, 96, 96), arch=STL10, num_classes=10)
    assert [p.geometry.kernel[0] for p in net.pools] == [4, 3, 2, 2] and net.top_shape == (512, 2, 2)
    assert [len(convs(e)) for e in net.encoders] == [1, 1, 2, 6]
    with torch.no_grad():
        assert net(torch.rand(1, 3, 96, 96)).recon.shape == (1, 3, 96, 96)


def test_the_classifier_follows_the_fc_token():
    assert SWWAE(arch="(8)3c-2p", num_classes=10).classifier is None
    with pytest.raises(ConfigError, match=r"classifier over 100 classes, but the data have 10: write 10fc"):
        SWWAE(arch="(8)3c-2p-100fc", num_classes=10)
    with pytest.raises(ConfigError, match="never trains"):
        SWWAEModule(arch="(8)3c-2p-10fc", lambda_nll=0.0)
    module = SWWAEModule(arch="(8)3c-2p")  # no fc token: reconstruction only, whatever lambda_nll says
    assert module.net.classifier is None and "acc" not in module.metrics["val"]


def test_the_output_bias_starts_at_the_logit_of_the_mean_pixel():
    net = SWWAE(image_shape=(3, 8, 8), widths=[4], pixel_mean=[0.1, 0.5, 0.9], num_classes=None)
    bias = convs(net.decoders[0])[-1].bias
    assert bias.tolist() == pytest.approx([math.log(0.1 / 0.9), 0.0, math.log(0.9 / 0.1)], abs=1e-6)
    # a pixel no unpooled value reaches (a zero input everywhere) starts at the mean colour
    with torch.no_grad():
        blank = net.decoders[0](torch.zeros(1, 4, 8, 8))
    assert blank[0, :, 4, 4].tolist() == pytest.approx([0.1, 0.5, 0.9], abs=1e-5)


@pytest.mark.slow
def test_train_py_takes_the_papers_mnist_network(make_config, tmp_path):
    cfg = make_config('model.arch="(8)5c-2p-(8)3c-2p-(8)3c-2p-10fc"')
    value = train(cfg)
    summary = json.loads((tmp_path / "output" / "metrics.json").read_text())
    assert summary["arch"] == "(8)5c-2p-(8)3c-2p-(8)3c-2p-10fc" and math.isfinite(value)
    assert {"test/acc", "test/middle_mse_1", "test/middle_mse_2"} <= set(summary["metrics"])


def test_a_reconstruction_only_string_monitors_the_reconstruction(make_config, tmp_path):
    cfg = make_config('model.arch="(8)5c-(8)3c-2p"', "data.num_labels=100")
    assert cfg.optimized_metric == "val/recon_mse"
    train(cfg)
    assert "test/acc" not in json.loads((tmp_path / "output" / "metrics.json").read_text())["metrics"]


@pytest.mark.slow
def test_cli_bad_string_is_an_error_line_with_a_caret_and_exit_2(tmp_path):
    result = command_here('model.arch="(16)5c-(32)5x-2p"', f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    error, caret = result.stderr.rstrip("\n").splitlines()[-2:]
    assert error.startswith('error: model.arch="(16)5c-(32)5x-2p": `(32)5x` is not a layer')
    assert caret.index("^") == error.index("(32)5x") and caret.strip() == "^" * len("(32)5x")
    assert "Traceback" not in result.stderr
