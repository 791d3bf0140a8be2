"""The project's version, in a module of its own: pyproject.toml reads it, every model folder
records it (``swwae.pretrained``), and ``swwae.__version__`` imports it only when asked (so
``import swwae.pooling`` loads nothing of swwae beside the pooling)."""

__version__ = "0.3.0"
