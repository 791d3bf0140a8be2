"""The project's version, in a module of its own: written into every model folder
(``swwae.pretrained``), which ``swwae/__init__.py`` itself imports."""

__version__ = "0.3.0"
