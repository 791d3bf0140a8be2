"""The Hugging Face Hub's HTTP API, faked: ``push_to_hub`` uploads into a local folder (the
tests run offline)."""

from __future__ import annotations

import shutil
from pathlib import Path


def fake_hub(monkeypatch, uploaded: Path) -> None:
    """``huggingface_hub``'s ``HfApi``, as ``push_to_hub`` calls it, copying the folder it would
    upload to ``uploaded``."""
    import huggingface_hub.hub_mixin

    class FakeApi:
        def __init__(self, token=None):
            pass

        def create_repo(self, repo_id, private=None, exist_ok=False):
            return type("Repo", (), {"repo_id": repo_id})()

        def upload_folder(self, *, repo_id, folder_path, **kwargs):
            shutil.copytree(folder_path, uploaded)
            return f"https://huggingface.co/{repo_id}/commit/0"

    monkeypatch.setattr(huggingface_hub.hub_mixin, "HfApi", FakeApi)
