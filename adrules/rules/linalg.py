"""Rules: linalg (to be filled)."""
