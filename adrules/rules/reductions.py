"""Rules: reductions (to be filled)."""
