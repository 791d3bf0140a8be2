"""What the wheel ships, found rather than listed: swwae and its subpackages, and configs/ of a
clone as the package swwae.configs (Hydra reads it as pkg://swwae.configs), its groups' folders
as that package's data. find_packages cannot see a mapped folder, so the mapping is named here;
the rest of the metadata is in pyproject.toml."""

from setuptools import find_packages, setup

CONFIGS = "swwae.configs"

setup(
    packages=[*find_packages(include=["swwae", "swwae.*"]), CONFIGS],
    package_dir={CONFIGS: "configs"},
    package_data={CONFIGS: ["*.yaml", "**/*.yaml"]},
    include_package_data=False,  # the groups' folders are data, not packages (no warning that they are absent)
)
