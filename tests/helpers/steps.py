"""Training steps called outside a Trainer (the module's maths, no loop around it)."""

import pytest

# the module's self.log says, as Lightning does, that no Trainer holds it: expected there
WITHOUT_A_TRAINER = pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")


def quiet_trainer(**settings):
    """A bare Lightning Trainer for a test's few batches: no logger, checkpoint, progress bar or
    model summary (nothing written, nothing printed), ``settings`` for the rest."""
    import lightning as L

    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False}
    return L.Trainer(**quiet, enable_model_summary=False, **settings)
