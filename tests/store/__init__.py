"""Tests of ease_jupyter.store (a package, so its module names cannot clash with other test dirs)."""
