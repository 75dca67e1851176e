"""Tests of ease_jupyter.zoo."""
