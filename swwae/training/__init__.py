"""The training job around the pure-torch core: everything Lightning- or Hydra-shaped.

``module`` (the LightningModule), ``data`` (in-memory data modules), ``callbacks``,
``loggers``, ``checkpoints`` (the one safe reader) and ``checkpoint_io`` (atomic writes),
``monitor`` (which metric picks best.ckpt), ``run`` (the job behind ``train.py``), ``sweep``
(sweep summaries), ``host_memory``. Import the submodule you need: importing this package
imports none of them, so ``swwae.training.data`` does not pull in the job.
"""
