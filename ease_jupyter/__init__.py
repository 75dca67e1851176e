"""ease_jupyter: ease.ml's declarative, multi-tenant model selection for Jupyter."""

__version__ = "0.1.0"
