"""Tokenizer for ease.ml programs (pvldb §3.1, Fig. 3).

Every token carries its 1-based line and column so the parser can say exactly
where a program is wrong. Characters the grammar never uses become ``ERROR``
tokens instead of raising here: the parser then reports whichever problem
comes first in the text.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

# Token kinds.
PUNCT = "punct"  # { } [ ] , ; : ::
WORD = "word"  # [A-Za-z0-9_]+ : keywords, field names and (all digits) integers
NEGATIVE = "negative"  # -12 : never valid, lexed whole for a precise error
DECIMAL = "decimal"  # 2.5 : never valid, lexed whole for a precise error
ERROR = "error"  # any other character
EOF = "eof"

_TOKEN_RE = re.compile(
    r"""
      (?P<skip>(?:[ \t\r\n\f\v]+|\#[^\n]*)+)   # whitespace and comments
    | (?P<decimal>-?[0-9]+\.[0-9]*)
    | (?P<negative>-[0-9]+)
    | (?P<word>[A-Za-z0-9_]+)
    | (?P<punct>::|[{}\[\],;:])
    | (?P<error>.)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    offset: int  # index of the first character in the source
    line: int
    column: int

    @property
    def end(self) -> int:
        return self.offset + len(self.text)

    @property
    def shown(self) -> str:
        """How the token is quoted in an error's ``found``."""
        return "end of input" if self.kind == EOF else self.text


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, always ending with one ``EOF`` token."""
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def token(kind: str, value: str, offset: int) -> Token:
        row = bisect.bisect_right(line_starts, offset) - 1
        return Token(kind, value, offset, row + 1, offset - line_starts[row] + 1)

    tokens: list[Token] = []
    for match in _TOKEN_RE.finditer(text):
        kind = match.lastgroup
        assert kind is not None
        if kind != "skip":
            tokens.append(token(kind, match.group(), match.start()))
    tokens.append(token(EOF, "", len(text)))
    return tokens
