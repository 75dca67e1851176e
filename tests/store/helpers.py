"""Helpers shared by the store tests: those of the store contract suite."""

from ease_jupyter.testing.store_contract import digest, feed, refine

__all__ = ["digest", "feed", "refine"]
