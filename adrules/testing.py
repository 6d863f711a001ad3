"""Rule and gradient checks against finite differences (to be filled)."""
