"""Training steps called outside a Trainer (the module's maths, no loop around it)."""

import pytest

# the module's self.log says, as Lightning does, that no Trainer holds it: expected there
WITHOUT_A_TRAINER = pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
