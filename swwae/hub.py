"""swwae networks on the Hugging Face Hub (``pip install -e ".[hub]"``).

``swwae.hub.SWWAE`` is :class:`swwae.model.SWWAE` with huggingface_hub's
``PyTorchModelHubMixin``: the same network, plus ``from_pretrained`` and ``push_to_hub``::

    from swwae.hub import SWWAE

    net = SWWAE.of(swwae.load("checkpoints/swwae_hard_mnist_sample_seed0/best.ckpt"))
    net.push_to_hub("user/swwae-mnist")            # after `hf auth login`
    net = SWWAE.from_pretrained("user/swwae-mnist")  # or a local model folder

The files are those of ``swwae.save_pretrained``: config.json, model.safetensors and the model
card README.md of ``swwae.card``, which ``push_to_hub`` uploads with them. ``swwae.load`` reads
a downloaded folder without huggingface_hub, and ``from_pretrained`` reads through
``swwae.pretrained`` too, so it never falls back on a pickle (``pytorch_model.bin``), as the
mixin's own loader would.
"""

from __future__ import annotations

import os
from pathlib import Path

from swwae.install import install_extra

try:
    from huggingface_hub import ModelCard, PyTorchModelHubMixin, snapshot_download
except ImportError:  # the optional extra
    raise ImportError(f"swwae.hub needs huggingface_hub: {install_extra('hub')}") from None

from swwae import model
from swwae.card import LICENSE, PAPER_URL, TAGS, RunFacts, model_card
from swwae.pretrained import CONFIG_FILE, WEIGHTS_FILE, measured_metrics, write_folder


def is_local_path(name: str | Path) -> bool:
    """Whether ``name`` can only be a path, never a Hub repository id (``name`` or
    ``namespace/name``): a ``Path``, one that starts with ``.``, ``/`` or ``~``, ends with a
    slash, holds a backslash or more than one slash, or is there on disk."""
    text = str(name)
    return (
        isinstance(name, Path)
        or text.startswith((".", "/", "~"))
        or text.endswith("/")
        or "\\" in text
        or text.count("/") > 1
        or os.path.exists(text)
    )


# tags: a copy, which the mixin extends with its own (the cards of swwae.card keep theirs)
class SWWAE(
    model.SWWAE, PyTorchModelHubMixin, library_name="swwae", license=LICENSE, tags=list(TAGS), paper_url=PAPER_URL
):
    """:class:`swwae.model.SWWAE` that saves to, loads from and pushes to the Hugging Face Hub."""

    # the Hub's save_pretrained (model card, push_to_hub=...) rather than swwae.pretrained's,
    # which comes first in the method order; both write the files through ``_save_pretrained``
    save_pretrained = PyTorchModelHubMixin.save_pretrained

    @classmethod
    def of(cls, net: model.SWWAE) -> SWWAE:
        """``net`` (from ``swwae.load``, or training) as a Hub network: the same settings,
        weights, run config and mode."""
        hub = cls(**net.settings)
        hub.load_state_dict(net.state_dict())
        hub.config = net.config
        return hub.train(net.training)

    def _save_pretrained(self, save_directory: Path) -> None:
        write_folder(self, save_directory, config=self.config)  # README.md too: the mixin keeps it

    def generate_model_card(self, *args, **kwargs) -> ModelCard:
        """swwae's own card (``swwae.card``), where the mixin would write its generic one."""
        run = RunFacts.of(self.config)
        return ModelCard(model_card(self, run=run, metrics=measured_metrics(self, run)))

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: str | Path,
        *,
        force_download: bool = False,
        token=None,
        cache_dir=None,
        local_files_only: bool = False,
        revision: str | None = None,
        map_location: str = "cpu",
        **settings,
    ) -> SWWAE:
        """A local model folder, or a Hub repository (``"user/repo"``: its config.json and
        model.safetensors only), read by swwae's own reader alone (``swwae.pretrained``), as
        ``swwae.load`` reads it: the mixin's would ``json.load`` config.json first, so that a
        damaged one was a bare ``JSONDecodeError`` naming no file. A path that names no folder
        (``./m``, ``/abs/m``, ``m/``, ``a/b/c``) is ``CheckpointError`` in one line, not a
        repository id that the Hub refuses. ``settings`` are not used: the folder's config.json
        decides the network."""
        name = str(pretrained_model_name_or_path)
        folder = Path(name).expanduser()
        if folder.is_dir() or is_local_path(pretrained_model_name_or_path):
            return cls.from_folder(folder, device=map_location)
        return cls._from_pretrained(
            model_id=name,
            revision=revision,
            cache_dir=cache_dir,
            force_download=force_download,
            local_files_only=local_files_only,
            token=token,
            map_location=map_location,
        )

    @classmethod
    def _from_pretrained(
        cls,
        *,
        model_id: str,
        revision: str | None,
        cache_dir,
        force_download: bool,
        local_files_only: bool,
        token,
        map_location: str = "cpu",
        **settings,
    ) -> SWWAE:
        """A local model folder, or the two files of a Hub repository, through swwae's own
        reader. ``settings`` (the mixin passes config.json's entries back) are not needed:
        the folder's config.json decides the network."""
        folder = Path(model_id)
        if not folder.is_dir():
            folder = Path(
                snapshot_download(
                    repo_id=model_id,
                    revision=revision,
                    cache_dir=cache_dir,
                    force_download=force_download,
                    local_files_only=local_files_only,
                    token=token,
                    allow_patterns=[CONFIG_FILE, WEIGHTS_FILE],
                )
            )
        return cls.from_folder(folder, device=map_location)
