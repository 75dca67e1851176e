"""The examples in the docstrings run."""

import doctest

import pytest

from ease_jupyter.selection import gp, selector, single


@pytest.mark.parametrize("module", [gp, selector, single], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
