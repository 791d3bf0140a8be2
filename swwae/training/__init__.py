"""The training job around the pure-torch core: everything Lightning- or Hydra-shaped.

``run`` (the job behind ``train.py``, read top to bottom, with the process settings),
``spec`` (the typed run spec and its checks), ``composing`` (the configs, their resolvers, what
Hydra knows of a job), ``runs`` (the run's folder), ``module`` (the LightningModule), ``data``
(in-memory data modules), ``callbacks`` (and the trackers), ``checkpoints`` (the one safe
reader, atomic writes), ``sweep`` (sweep summaries). Import the submodule you need: importing
this package imports none of them, so ``swwae.training.data`` does not pull in the job.
"""
