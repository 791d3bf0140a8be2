"""Train a Stacked What-Where Auto-encoder: ``python train.py model=swwae_hard``.

Thin Hydra entry point; the job is ``swwae.run.train``. Bad input (a wrong config value, a
missing dataset) ends with one ``error:`` line and exit status 2.
"""

import sys

import hydra
from omegaconf import DictConfig

from swwae.errors import ConfigError
from swwae.run import set_torch_defaults, train


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float:
    set_torch_defaults()
    try:
        return train(cfg)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
