"""Rules: indexing (to be filled)."""
