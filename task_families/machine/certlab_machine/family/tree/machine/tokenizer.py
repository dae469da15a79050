"""Turns source text into tokens, each with its 0-based character position in the source.

Token kinds: ``num`` (decimal digits), ``name`` (a letter or ``_`` then letters, digits
or ``_``), ``keyword`` (``let`` and ``in``), ``op`` (one of ``OPERATORS``) and a final
``end`` token positioned just past the last character.
"""

from __future__ import annotations

from typing import NamedTuple

KEYWORDS = ("let", "in")
# Longest first, so that "**" is read as one operator and never as two "*".
OPERATORS = ("**", "+", "-", "*", "/", "%", "(", ")", "=")


class MachineError(Exception):
    """Any error of the interpreter; ``position`` is the 0-based offset in the source where it lies."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (at position {position})")
        self.message = message
        self.position = position


class TokenizeError(MachineError):
    """The source holds a character or a word that is not part of the language."""


class Token(NamedTuple):
    kind: str
    text: str
    pos: int


def _is_name_char(char: str) -> bool:
    return char.isascii() and (char.isalnum() or char == "_")


def tokenize(source: str) -> list[Token]:
    """Every token of ``source`` in order, ending with an ``end`` token."""
    tokens: list[Token] = []
    index = 0
    while index < len(source):
        char = source[index]
        if char.isspace():
            index += 1
            continue
        start = index
        index += 1
        if char.isascii() and char.isdigit():
            while index < len(source) and source[index].isascii() and source[index].isdigit():
                index += 1
            if index < len(source) and _is_name_char(source[index]):
                raise TokenizeError(f"malformed number {source[start : index + 1]!r}", index)
            tokens.append(Token("num", source[start:index], start))
        elif _is_name_char(char):
            while index < len(source) and _is_name_char(source[index]):
                index += 1
            word = source[start:index]
            tokens.append(Token("keyword" if word in KEYWORDS else "name", word, start))
        else:
            operator = next((op for op in OPERATORS if source.startswith(op, start)), None)
            if operator is None:
                raise TokenizeError(f"unexpected character {char!r}", start)
            index = start + len(operator)
            tokens.append(Token("op", operator, start))
    tokens.append(Token("end", "", len(source)))
    return tokens


def dump(source: str) -> list[str]:
    """The tokens as readable lines ``"POSITION KIND TEXT"``, for looking at what the tokenizer sees."""
    return [f"{token.pos} {token.kind} {token.text}".rstrip() for token in tokenize(source)]
