"""The machine family plugin: four modules, two-file defects."""

from __future__ import annotations

from pathlib import Path

from certlab_core.plugin import Defect, Seed, TaskFamily, hookimpl

FAMILY_DIR = Path(__file__).parent / "family"
TOKENIZER = "machine/tokenizer.py"
PARSER = "machine/parser.py"
EVALUATOR = "machine/evaluator.py"

DEFECTS = (
    Defect(
        id="operator-token-in-tree",
        defect_class="coordinated-node-shape",
        description=(
            "the parser stores the whole operator token in binary nodes and the evaluator was adapted to read its "
            "text: end-to-end results stay right, the parser's trees are wrong, and neither file alone can be reverted"
        ),
        seeds=[
            Seed(
                PARSER,
                "return BinOp(token.text, left, right, token.pos)",
                "return BinOp(token, left, right, token.pos)",
            ),
            Seed(
                EVALUATOR,
                "return _apply(node.op, left, right, node.pos)",
                "return _apply(node.op.text, left, right, node.pos)",
            ),
        ],
    ),
    Defect(
        id="power-split-into-stars",
        defect_class="coordinated-token-split",
        description=(
            'the tokenizer splits "**" into two "*" tokens and the parser glues adjacent stars back together at '
            "product level, so powers group left and bind as loosely as products; neither file alone can be reverted"
        ),
        seeds=[
            Seed(TOKENIZER, 'OPERATORS = ("**", "+",', 'OPERATORS = ("+",'),
            Seed(
                PARSER,
                '        if self._peek_op("**"):\n'
                "            token = self._advance()\n"
                "            return self._binary(token, base, self._unary())\n",
                "",
            ),
            Seed(
                PARSER,
                '        while self._peek_op("*", "/", "%"):\n'
                "            token = self._advance()\n"
                "            node = self._binary(token, node, self._unary())\n",
                '        while self._peek_op("*", "/", "%"):\n'
                "            token = self._advance()\n"
                '            if token.text == "*" and self._peek_op("*") and self._peek().pos == token.pos + 1:\n'
                "                self._advance()\n"
                '                token = Token("op", "**", token.pos)\n'
                "            node = self._binary(token, node, self._unary())\n",
            ),
        ],
    ),
    Defect(
        id="bad-character-position",
        defect_class="position-off-by-one",
        description=(
            "the tokenizer reports an unexpected character one position past it; the api's column shows it, "
            "but the fix belongs in the tokenizer, whose own tests check the raised position"
        ),
        seeds=[
            Seed(
                TOKENIZER,
                'raise TokenizeError(f"unexpected character {char!r}", start)',
                'raise TokenizeError(f"unexpected character {char!r}", index)',
            )
        ],
    ),
    Defect(
        id="remainder-at-sum-level",
        defect_class="operator-precedence",
        description='the parser reads "%" at the precedence of "+" and "-" instead of "*" and "/"',
        seeds=[
            Seed(PARSER, 'while self._peek_op("+", "-"):', 'while self._peek_op("+", "-", "%"):'),
            Seed(PARSER, 'while self._peek_op("*", "/", "%"):', 'while self._peek_op("*", "/"):'),
        ],
    ),
    Defect(
        id="sum-groups-right",
        defect_class="associativity",
        description="the parser groups chains of + and - to the right, so 10 - 3 - 2 is 10 - (3 - 2)",
        seeds=[
            Seed(
                PARSER,
                "node = self._binary(token, node, self._product())",
                "node = self._binary(token, node, self._sum())",
            )
        ],
    ),
    Defect(
        id="let-binding-leaks",
        defect_class="scope-leak",
        description="the evaluator binds a let name in the shared environment, so it outlives its body",
        seeds=[
            Seed(
                EVALUATOR,
                "    return _evaluate(node.body, {**env, node.name: value})\n",
                "    env[node.name] = value\n    return _evaluate(node.body, env)\n",
            )
        ],
    ),
)


@hookimpl
def certlab_task_families() -> list[TaskFamily]:
    """The machine family, with its files at absolute paths inside this installed package."""
    return [
        TaskFamily.in_folder(
            FAMILY_DIR,
            name="machine",
            version="1.0.0",
            description="a four-module integer expression interpreter: tokenizer, parser, evaluator and api",
            allowed_paths=["machine/*.py"],
            test_paths=["tests"],
            module_names=["machine"],
            defects=DEFECTS,
        )
    ]
