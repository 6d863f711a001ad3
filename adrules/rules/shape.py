"""Rules: shape (to be filled)."""
