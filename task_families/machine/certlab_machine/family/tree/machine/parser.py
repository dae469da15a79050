"""Parses tokens into a tree of nodes by recursive descent.

Grammar, loosest binding first::

    expression := "let" NAME "=" expression "in" expression | sum
    sum        := product (("+" | "-") product)*          left-associative
    product    := unary (("*" | "/" | "%") unary)*        left-associative
    unary      := "-" unary | power
    power      := atom ("**" unary)?                      right-associative; binds tighter than "-"
    atom       := NUM | NAME | "(" expression ")"

so ``-2 ** 2`` is ``-(2 ** 2)`` and ``2 ** 3 ** 2`` is ``2 ** (3 ** 2)``.
"""

from __future__ import annotations

from typing import NamedTuple

from machine.tokenizer import MachineError, Token, tokenize


class ParseError(MachineError):
    """The tokens do not form an expression."""


class Num(NamedTuple):
    value: int
    pos: int


class Var(NamedTuple):
    name: str
    pos: int


class Neg(NamedTuple):
    operand: Node
    pos: int


class BinOp(NamedTuple):
    op: str
    left: Node
    right: Node
    pos: int


class Let(NamedTuple):
    name: str
    value: Node
    body: Node
    pos: int


Node = Num | Var | Neg | BinOp | Let


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.index = 0

    def _peek(self) -> Token:
        return self.tokens[self.index]

    def _advance(self) -> Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def _peek_op(self, *operators: str) -> bool:
        token = self._peek()
        return token.kind == "op" and token.text in operators

    def _expect(self, kind: str, text: str | None = None) -> Token:
        token = self._peek()
        if token.kind != kind or (text is not None and token.text != text):
            wanted = repr(text) if text is not None else kind
            found = "end of input" if token.kind == "end" else repr(token.text)
            raise ParseError(f"expected {wanted}, found {found}", token.pos)
        return self._advance()

    def _binary(self, token: Token, left: Node, right: Node) -> BinOp:
        return BinOp(token.text, left, right, token.pos)

    def program(self) -> Node:
        node = self._expression()
        self._expect("end")
        return node

    def _expression(self) -> Node:
        token = self._peek()
        if token.kind == "keyword" and token.text == "let":
            self._advance()
            name = self._expect("name").text
            self._expect("op", "=")
            value = self._expression()
            self._expect("keyword", "in")
            return Let(name, value, self._expression(), token.pos)
        return self._sum()

    def _sum(self) -> Node:
        node = self._product()
        while self._peek_op("+", "-"):
            token = self._advance()
            node = self._binary(token, node, self._product())
        return node

    def _product(self) -> Node:
        node = self._unary()
        while self._peek_op("*", "/", "%"):
            token = self._advance()
            node = self._binary(token, node, self._unary())
        return node

    def _unary(self) -> Node:
        if self._peek_op("-"):
            token = self._advance()
            return Neg(self._unary(), token.pos)
        return self._power()

    def _power(self) -> Node:
        base = self._atom()
        if self._peek_op("**"):
            token = self._advance()
            return self._binary(token, base, self._unary())
        return base

    def _atom(self) -> Node:
        token = self._peek()
        if token.kind == "num":
            self._advance()
            return Num(int(token.text), token.pos)
        if token.kind == "name":
            self._advance()
            return Var(token.text, token.pos)
        if self._peek_op("("):
            self._advance()
            node = self._expression()
            self._expect("op", ")")
            return node
        found = "end of input" if token.kind == "end" else repr(token.text)
        raise ParseError(f"expected a number, a name or '(', found {found}", token.pos)


def parse(source: str) -> Node:
    """The tree of the whole of ``source``; raise TokenizeError or ParseError when it is not an expression."""
    return _Parser(tokenize(source)).program()


def sexpr(node: Node) -> str:
    """The tree written as an s-expression, e.g. ``(+ 1 (* 2 x))``, ``(neg y)``, ``(let x 1 x)``."""
    if isinstance(node, Num):
        return str(node.value)
    if isinstance(node, Var):
        return node.name
    if isinstance(node, Neg):
        return f"(neg {sexpr(node.operand)})"
    if isinstance(node, BinOp):
        return f"({node.op} {sexpr(node.left)} {sexpr(node.right)})"
    return f"(let {node.name} {sexpr(node.value)} {sexpr(node.body)})"


def parse_sexpr(source: str) -> str:
    """``sexpr(parse(source))``: how the parser groups an expression."""
    return sexpr(parse(source))
