"""Adapters from agent frameworks to an avatar session (each needs its framework's optional extra)."""
