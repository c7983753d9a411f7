"""Small helpers for a billing service."""
