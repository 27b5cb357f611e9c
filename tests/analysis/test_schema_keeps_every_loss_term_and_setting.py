"""The results schema keeps every loss term the objectives emit, and every trial setting."""

from analysis.schema import HISTORY_SCHEMA, LOSS_TERMS
from models import LOSS_TERMS as TERMS_BY_OBJECTIVE


def test_every_objectives_loss_terms_have_a_history_column():
    emitted = {term for terms in TERMS_BY_OBJECTIVE.values() for term in terms} | {"loss"}
    assert emitted <= set(LOSS_TERMS) <= set(HISTORY_SCHEMA.names)
