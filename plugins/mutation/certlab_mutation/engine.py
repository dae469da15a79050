"""The mutation proof: a tree's mutants, made deterministically, and graded.

"The clean tree passes and each seeded tree fails" shows that the suite sees the seeded
defects; the mutation proof measures what else it would let through. Each mutant is one
small, plausible edit of the code an agent may change (the family's ``allowed_paths``,
never its tests), made by a small AST mutator of certlab's own with the standard operators:

- ``compare``: ``<`` and ``<=``, ``>`` and ``>=``, ``==`` and ``!=``, ``is`` and ``is not``,
  ``in`` and ``not in`` swapped;
- ``arithmetic``: ``+`` and ``-`` swapped, ``*`` to ``/``, ``/`` and ``//`` to ``*``, ``%`` to
  ``//``, ``**`` to ``*`` (augmented assignments too);
- ``boolean``: ``and`` and ``or`` swapped;
- ``not``: a ``not`` dropped;
- ``integer``: an integer literal plus one;
- ``minmax``: a call of ``min`` made one of ``max`` and the reverse;
- ``constant``: ``True`` and ``False`` swapped;
- ``loop``: ``break`` and ``continue`` swapped.

Nothing inside a type annotation, an f-string or ``if __name__ == "__main__"`` is mutated,
and a mutant whose source does not parse or parses to the unchanged tree is dropped. The
edits are found from the AST and made on the source text, so a survivor shows as a
one-line diff; the same tree gives the same mutants, in the same order, on any machine.

Each mutant is graded as a trial's work copy is (an agent's plausible but wrong fix is
exactly such a mutant): issued from the clean tree, the mutant applied, then every grader
of the chain in its own fresh process, in order, stopping at the first that fails. Only
a mutant's verdict is wanted, so its request says ``first_failure``: the suite stops at its
first failing test, the held-out cases at the first that does not hold. A mutant counts as
killed by the grader that failed on it, or that reached a time limit (a mutant may loop
forever; the limits are a multiple of the clean tree's CPU and wall time per grader, and
everything the mutant's processes started is killed with it). A grader that breaks on a
mutant (its verdict refused, as when a held-out lock moved) kills nothing: like a trial's
grader error, it is a problem of the proof, which then does not hold. The visible suite's
score counts the kills of every grader but the held-out one; the combined score counts them
all. Each has its threshold, declared by the family (``TaskFamily.visible_mutation_threshold``,
default 0.8, and ``mutation_threshold``, default 0.9): a weak visible suite lets plausible wrong
fixes look right to the agent, however many of them the held-out cases catch afterwards.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import io
import math
import resource
import shutil
import signal
import tempfile
import time
import tokenize
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
from attrs import frozen

from certlab_core.plugin.errors import InstrumentError, UsageError
from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.plugin.types.grader import AcceptanceLock, Grader, GradeRequest, GradeResult
from certlab_core.sdk.command import become_subreaper, sweep_descendants
from certlab_core.sdk.forking import ChildFailure, ForkedCallError, call_in_fork, map_in_forks, use_temp_folder
from certlab_core.sdk.grading import held_out_names
from certlab_core.sdk.trees import temporary_folder
from certlab_core.sdk.workcopy import in_allowed_paths, materialise, taskset_sha256

#: The name of the operator set; a recorded proof is re-checked only under the same one.
MUTATOR = "certlab-ast/1"
OPERATORS = ("compare", "arithmetic", "boolean", "not", "integer", "minmax", "constant", "loop")
#: A family that declares no threshold must kill at least this share of its mutants (suite and held-out cases).
DEFAULT_THRESHOLD = 0.9
#: ... and its visible suite alone at least this share.
DEFAULT_VISIBLE_THRESHOLD = 0.8
#: A grader's time limits on a mutant: this multiple of its wall and its CPU time on the clean tree, and at least
#: MIN_STAGE_TIMEOUT_S of each. The CPU limit (RLIMIT_CPU of each of the grader's processes) stops a mutant that
#: loops at the same cost under any load; the wall limit stops one that blocks.
TIMEOUT_FACTOR = 10.0
MIN_STAGE_TIMEOUT_S = 2.0
CLEAN_TIMEOUT_S = 300.0
DETAIL_CHARS = 200

Outcome = Literal["survived", "failed", "timeout", "error"]


# ----------------------------------------------------------------------------- mutants


@frozen
class Mutant:
    """One edit of one file: the text ``original`` at ``[start, end)`` (characters) becomes ``replacement``."""

    id: str
    path: str
    line: int
    column: int
    operator: str
    start: int
    end: int
    original: str
    replacement: str

    def apply(self, text: str) -> str:
        if text[self.start : self.end] != self.original:
            raise InstrumentError(f"mutant {self.id}: the file no longer holds {self.original!r} there")
        return text[: self.start] + self.replacement + text[self.end :]

    def diff(self, text: str) -> str:
        """A unified diff of the file, one line of context: what a family author reads of a survivor."""
        return "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True),
                self.apply(text).splitlines(keepends=True),
                fromfile=f"a/{self.path}",
                tofile=f"b/{self.path}",
                n=1,
            )
        )


# each comparison's own tokens, then the text that replaces them
_COMPARE: dict[type, tuple[tuple[str, ...], str]] = {
    ast.Lt: (("<",), "<="),
    ast.LtE: (("<=",), "<"),
    ast.Gt: ((">",), ">="),
    ast.GtE: ((">=",), ">"),
    ast.Eq: (("==",), "!="),
    ast.NotEq: (("!=",), "=="),
    ast.Is: (("is",), "is not"),
    ast.IsNot: (("is", "not"), "is"),
    ast.In: (("in",), "not in"),
    ast.NotIn: (("not", "in"), "in"),
}
# each operator's own token, then the token that replaces it
_ARITHMETIC_TOKENS = {
    ast.Add: ("+", "-"),
    ast.Sub: ("-", "+"),
    ast.Mult: ("*", "/"),
    ast.Div: ("/", "*"),
    ast.FloorDiv: ("//", "*"),
    ast.Mod: ("%", "//"),
    ast.Pow: ("**", "*"),
}
_MINMAX = {"min": "max", "max": "min"}


class _Source:
    """A file's text with the two position systems mapped: AST (line, UTF-8 byte column) and tokens (line, char)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = io.StringIO(text).readlines()  # split where the tokenizer splits: at "\n" only
        self.line_starts = [0]
        for line in self.lines:
            self.line_starts.append(self.line_starts[-1] + len(line))
        self.tokens = [
            token
            for token in tokenize.generate_tokens(io.StringIO(text).readline)
            if token.type in (tokenize.OP, tokenize.NAME)
        ]

    def offset(self, line: int, byte_column: int) -> int:
        """The character offset in the text of an AST position."""
        row = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        return self.line_starts[line - 1] + len(row.encode("utf-8")[:byte_column].decode("utf-8", "replace"))

    def start_of(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def end_of(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def tokens_between(self, start: int, end: int) -> list[tuple[int, int, str]]:
        """The operator and name tokens wholly inside ``[start, end)``, parentheses left out: (start, end, text)."""
        found = []
        for token in self.tokens:
            token_start = self.line_starts[token.start[0] - 1] + token.start[1]
            token_end = self.line_starts[token.end[0] - 1] + token.end[1]
            if token_start >= start and token_end <= end and token.string not in ("(", ")"):
                found.append((token_start, token_end, token.string))
        return found

    def position(self, offset: int) -> tuple[int, int]:
        """(line, column), both 1-based, of a character offset."""
        line = max(i for i, start in enumerate(self.line_starts[:-1] or [0]) if start <= offset)
        return line + 1, offset - self.line_starts[line] + 1


@frozen
class _Edit:
    start: int
    end: int
    replacement: str
    operator: str


class _Finder(ast.NodeVisitor):
    """Walks a module and proposes one edit per mutation site; annotations and f-strings are not entered."""

    def __init__(self, source: _Source) -> None:
        self.source = source
        self.edits: list[_Edit] = []

    # -- what is not entered
    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return None

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        arguments = node.args
        for default in [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]:
            self.visit(default)
        for statement in node.body:
            self.visit(statement)

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
            self.visit(default)
        self.visit(node.body)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id == "__name__"
            and not node.orelse
        ):
            return None
        self.generic_visit(node)

    # -- the operators
    def _operator_tokens(self, before: ast.AST, after: ast.AST, words: tuple[str, ...]) -> tuple[int, int] | None:
        tokens = self.source.tokens_between(self.source.end_of(before), self.source.start_of(after))
        if [text for _s, _e, text in tokens] != list(words):
            return None
        return tokens[0][0], tokens[-1][1]

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for index, op in enumerate(node.ops):
            if type(op) not in _COMPARE:
                continue
            own, replacement = _COMPARE[type(op)]
            span = self._operator_tokens(operands[index], operands[index + 1], own)
            if span is not None:
                self.edits.append(_Edit(span[0], span[1], replacement, "compare"))
        self.generic_visit(node)

    def _arithmetic(self, op: ast.operator, before: ast.AST, after: ast.AST, augmented: bool) -> None:
        pair = _ARITHMETIC_TOKENS.get(type(op))
        if pair is None:
            return
        own, replacement = pair
        if augmented:
            own, replacement = own + "=", replacement + "="
        span = self._operator_tokens(before, after, (own,))
        if span is not None:
            self.edits.append(_Edit(span[0], span[1], replacement, "arithmetic"))

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if not any(_is_text(side) for side in (node.left, node.right)):  # string building is not arithmetic
            self._arithmetic(node.op, node.left, node.right, augmented=False)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if not _is_text(node.value):
            self._arithmetic(node.op, node.target, node.value, augmented=True)
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        word, other = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        spans = [self._operator_tokens(a, b, (word,)) for a, b in zip(node.values, node.values[1:], strict=False)]
        if spans and all(span is not None for span in spans):
            # one mutant swaps every ``and`` of the expression: ``a and b and c`` -> ``a or b or c``
            first, last = spans[0], spans[-1]
            assert first is not None and last is not None
            segment = self.source.text[first[0] : last[1]]
            pieces = []
            cursor = first[0]
            for span in spans:
                assert span is not None
                pieces.append(self.source.text[cursor : span[0]] + other)
                cursor = span[1]
            pieces.append(self.source.text[cursor : last[1]])
            replaced = "".join(pieces)
            if replaced != segment:
                self.edits.append(_Edit(first[0], last[1], replaced, "boolean"))
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            start = self.source.start_of(node)
            tokens = self.source.tokens_between(start, self.source.start_of(node.operand))
            if [text for _s, _e, text in tokens] == ["not"]:
                # drop the word and the blanks after it
                end = self.source.start_of(node.operand)
                self.edits.append(_Edit(start, end, "(" * self._opening_parens(tokens[0][1], end), "not"))
        self.generic_visit(node)

    def _opening_parens(self, start: int, end: int) -> int:
        return self.source.text[start:end].count("(")

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if type(value) is int:
            self.edits.append(_Edit(self.source.start_of(node), self.source.end_of(node), str(value + 1), "integer"))
        elif type(value) is bool:
            self.edits.append(_Edit(self.source.start_of(node), self.source.end_of(node), str(not value), "constant"))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in _MINMAX:
            self.edits.append(_Edit(self.source.start_of(func), self.source.end_of(func), _MINMAX[func.id], "minmax"))
        self.generic_visit(node)

    def visit_Break(self, node: ast.Break) -> None:
        self.edits.append(_Edit(self.source.start_of(node), self.source.end_of(node), "continue", "loop"))

    def visit_Continue(self, node: ast.Continue) -> None:
        self.edits.append(_Edit(self.source.start_of(node), self.source.end_of(node), "break", "loop"))


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str | bytes))


def file_mutants(path: str, text: str) -> list[Mutant]:
    """Every mutant of one file's text, in source order; ``path`` (relative to the tree) names them."""
    try:
        module = ast.parse(text)
        source = _Source(text)
    except (SyntaxError, ValueError, tokenize.TokenError) as error:
        raise InstrumentError(f"{path}: cannot be parsed to make its mutants ({error})") from None
    finder = _Finder(source)
    finder.visit(module)
    original_dump = ast.dump(module)
    mutants: list[Mutant] = []
    seen: set[tuple[int, int, str]] = set()
    for edit in sorted(finder.edits, key=lambda e: (e.start, e.end, e.operator, e.replacement)):
        key = (edit.start, edit.end, edit.replacement)
        if key in seen:
            continue
        seen.add(key)
        mutated = text[: edit.start] + edit.replacement + text[edit.end :]
        try:
            if ast.dump(ast.parse(mutated)) == original_dump:
                continue
        except SyntaxError:
            continue
        line, column = source.position(edit.start)
        mutants.append(
            Mutant(
                id=f"{path}:{line}:{column}:{edit.operator}",
                path=path,
                line=line,
                column=column,
                operator=edit.operator,
                start=edit.start,
                end=edit.end,
                original=text[edit.start : edit.end],
                replacement=edit.replacement,
            )
        )
    _number_repeats(mutants)
    return mutants


def _number_repeats(mutants: list[Mutant]) -> None:
    counts: dict[str, int] = {}
    for index, mutant in enumerate(mutants):
        counts[mutant.id] = counts.get(mutant.id, 0) + 1
        if counts[mutant.id] > 1:
            mutants[index] = attrs.evolve(mutant, id=f"{mutant.id}#{counts[mutant.id]}")


def mutable_files(family: TaskFamily) -> list[str]:
    """The Python files of the clean tree an agent may change (``allowed_paths``), the visible tests left out."""
    tree = Path(family.tree_dir)
    found = []
    for path in sorted(tree.rglob("*.py")):
        relative = path.relative_to(tree).as_posix()
        if "__pycache__" in path.parts or path.is_symlink():
            continue
        if any(relative == t or relative.startswith(t.rstrip("/") + "/") for t in family.test_paths):
            continue
        if in_allowed_paths(relative, family.allowed_paths):
            found.append(relative)
    return found


def family_mutants(family: TaskFamily) -> list[Mutant]:
    """Every mutant of the family's clean tree, file by file in path order."""
    tree = Path(family.tree_dir)
    mutants: list[Mutant] = []
    for relative in mutable_files(family):
        mutants.extend(file_mutants(relative, (tree / relative).read_text(encoding="utf-8")))
    return mutants


def mutants_sha256(mutants: Sequence[Mutant]) -> str:
    """One hash over every mutant's place and edit: the same tree gives the same hash on any machine."""
    digest = hashlib.sha256(MUTATOR.encode())
    for mutant in mutants:
        digest.update(f"\n{mutant.id}\0{mutant.start}\0{mutant.end}\0{mutant.original}\0{mutant.replacement}".encode())
    return digest.hexdigest()


# ----------------------------------------------------------------------------- grading the mutants


@frozen
class MutantResult:
    """What the grader chain made of one mutant: ``survived``, killed by ``grader`` (``failed`` or ``timeout``),
    or ``error``: that grader broke, so the mutant is neither killed nor a survivor."""

    mutant: str
    outcome: Outcome
    grader: str | None = None
    failure_mode: str | None = None
    detail: str = ""

    @property
    def killed(self) -> bool:
        return self.outcome in ("failed", "timeout")


@frozen
class CleanRun:
    """The clean tree through the same chain: every grader must pass; its times set the mutants' time limits."""

    passed: bool
    seconds: tuple[tuple[str, float], ...]
    problem: str = ""
    collected: tuple[str, ...] = ()  # the visible tests the suite collected, when it was asked to discover them
    cpu_seconds: tuple[tuple[str, float], ...] = ()  # each grader's CPU time, its processes' included


@frozen
class MutationProof:
    """A family's mutation proof: its mutants, what killed each, the two scores and the family's threshold of each."""

    family: str
    mutants: tuple[Mutant, ...]
    results: tuple[MutantResult, ...]
    threshold: float
    visible_threshold: float = DEFAULT_VISIBLE_THRESHOLD
    stage_timeouts_s: tuple[tuple[str, float], ...] = ()
    stage_cpu_limits_s: tuple[tuple[str, int], ...] = ()
    wall_s: float = 0.0
    problems: tuple[str, ...] = ()
    held_out_graders: tuple[str, ...] = ()  # the graders of the held-out role: their kills are not the suite's

    @property
    def count(self) -> int:
        return len(self.mutants)

    @property
    def killed(self) -> int:
        return sum(1 for r in self.results if r.killed)

    @property
    def killed_by_suite(self) -> int:
        return sum(1 for r in self.results if r.killed and r.grader not in self.held_out_graders)

    @property
    def score(self) -> float | None:
        """The share killed by the suite and the held-out cases together (None without a mutant)."""
        return self.killed / self.count if self.count else None

    @property
    def suite_score(self) -> float | None:
        """The share the visible suite alone kills (every grader but the held-out one)."""
        return self.killed_by_suite / self.count if self.count else None

    @property
    def survivors(self) -> tuple[Mutant, ...]:
        survived = {r.mutant for r in self.results if r.outcome == "survived"}
        return tuple(m for m in self.mutants if m.id in survived)

    @property
    def suite_survivors(self) -> tuple[Mutant, ...]:
        """The mutants the visible suite lets through: the survivors and those only the held-out cases kill."""
        through = {r.mutant for r in self.results if r.outcome == "survived" or r.grader in self.held_out_graders}
        return tuple(m for m in self.mutants if m.id in through)

    def below(self, minimum: float) -> bool:
        """Whether the combined score is under ``minimum`` (a proof without a mutant always is)."""
        return self.score is None or self.score < minimum

    def suite_below(self, minimum: float) -> bool:
        """Whether the visible suite's own score is under ``minimum`` (a proof without a mutant always is)."""
        return self.suite_score is None or self.suite_score < minimum


def family_threshold(family: TaskFamily) -> float:
    """The combined score the family declares it must reach (``TaskFamily.mutation_threshold``), else 0.9."""
    declared = getattr(family, "mutation_threshold", None)
    if isinstance(declared, int | float) and not isinstance(declared, bool):
        return float(declared)
    return DEFAULT_THRESHOLD


def family_visible_threshold(family: TaskFamily) -> float:
    """The visible suite's own score the family declares it must reach (``visible_mutation_threshold``), else 0.8."""
    declared = getattr(family, "visible_mutation_threshold", None)
    if isinstance(declared, int | float) and not isinstance(declared, bool):
        return float(declared)
    return DEFAULT_VISIBLE_THRESHOLD


def visible_minimum(
    proof: MutationProof, minimum: float | None, minimum_visible: float | None
) -> tuple[float | None, str]:
    """The visible suite's refusal floor and where it comes from: ``--min-visible-mutation-score`` when given; else,
    with ``--min-mutation-score S``, the family's visible threshold or S, whichever is lower (the visible score can
    never exceed the combined one, so S is the most it may be asked for); else none (below the threshold warns)."""
    if minimum_visible is not None:
        return minimum_visible, "--min-visible-mutation-score"
    if minimum is None:
        return None, ""
    if proof.visible_threshold <= minimum:
        return proof.visible_threshold, "its visible threshold, binding under --min-mutation-score"
    return minimum, "--min-mutation-score"


def _short(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= DETAIL_CHARS else first[:DETAIL_CHARS] + "..."


@frozen
class StageLimits:
    """A grader's limits on one mutant: wall seconds for the grader's process, CPU seconds for each of its processes."""

    wall_s: float
    cpu_s: int


@frozen
class _Stage:
    grader: str
    wall_s: float
    cpu_s: float


_Staged = tuple["MutantResult", list[_Stage], tuple[str, ...]]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _killed_at_cpu_limit(result: object) -> bool:
    """Whether a grading says its test process was killed by SIGXCPU: the CPU limit stopped it, whatever this
    process's count of its children's CPU time says (CI once counted less than the limit at a load of 4)."""
    return isinstance(result, GradeResult) and f"killed by signal {signal.SIGXCPU.value}" in result.detail


def _grade_within(
    grade: Callable[[GradeRequest], GradeResult], request: GradeRequest, cpu_s: int | None, temp: str
) -> Any:
    """In the grader's fresh process: cap the CPU time of it and of every process it starts, then grade,
    every temp folder made below ``temp``."""
    use_temp_folder(temp)
    if cpu_s is not None:
        _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        top = hard if hard != resource.RLIM_INFINITY else cpu_s + 1
        resource.setrlimit(resource.RLIMIT_CPU, (min(cpu_s, top), min(cpu_s + 1, top)))
    return grade(request)


def _stages(graders: Sequence[Grader], request: GradeRequest, limits: dict[str, StageLimits] | None) -> _Staged:
    """Each grader in its own fresh process, in order, to the first that does not pass.

    Returns the verdict, each grader's wall and CPU time, and the visible tests a grader
    reported collecting. A grader whose processes used their CPU limit (a process past it
    is killed by the kernel), or that ran past its wall limit, kills the mutant at a time limit.
    """
    stages: list[_Stage] = []
    collected: tuple[str, ...] = ()
    for grader in graders:
        started, cpu_before = time.monotonic(), _children_cpu_s()
        limit = None if limits is None else limits[grader.name]
        wall_limit = CLEAN_TIMEOUT_S if limit is None else limit.wall_s
        cpu_limit = None if limit is None else limit.cpu_s
        result: Any = None
        failure: ChildFailure | None = None
        # A grader killed at its limit cannot delete its scratch (a copy of the tree): its temp folders are made in
        # one made here, deleted once what the killed grader started is gone too.
        with temporary_folder("certlab-mutant-") as temp:
            try:
                result = call_in_fork(_grade_within, grader.grade, request, cpu_limit, temp.path, timeout=wall_limit)
            except ForkedCallError as error:
                sweep_descendants()  # what the killed grader started, now orphaned here
                failure = error.failure
        cpu = _children_cpu_s() - cpu_before
        passed = isinstance(result, GradeResult) and result.passed
        if cpu_limit is not None and not passed and (cpu >= cpu_limit or _killed_at_cpu_limit(result)):
            detail = f"grader {grader.name} used its {cpu_limit} CPU-second limit"
            return MutantResult("", "timeout", grader.name, None, detail), stages, ()
        if failure is not None:
            outcome: Outcome = "timeout" if failure.kind == "timeout" else "error"
            how = f"ran past its {wall_limit:g} s limit" if outcome == "timeout" else f"broke: {failure.summary}"
            return MutantResult("", outcome, grader.name, None, _short(f"grader {grader.name} {how}")), stages, ()
        stages.append(_Stage(grader.name, time.monotonic() - started, cpu))
        if not isinstance(result, GradeResult):
            return MutantResult("", "error", grader.name, None, f"returned {type(result).__name__}"), stages, ()
        if not result.passed:
            verdict = MutantResult("", "failed", grader.name, result.failure_mode, _short(result.detail))
            return verdict, stages, ()
        found = result.data.get("collected")
        if isinstance(found, list | tuple):
            collected = tuple(str(test) for test in found)
    return MutantResult("", "survived"), stages, collected


def _grade_tree(
    family: TaskFamily,
    mutant: Mutant | None,
    graders: Sequence[Grader],
    expected: tuple[str, ...],
    lock: AcceptanceLock | None,
    limits: dict[str, StageLimits] | None,
) -> _Staged:
    """In a fresh process: issue the clean tree, apply the mutant (as an agent's edit), run the chain's stages."""
    become_subreaper()  # every orphan of the mutant's processes is adopted here, and swept
    scratch = Path(tempfile.mkdtemp(prefix="certlab-mutant-"))
    try:
        work = scratch / "work"
        issued = materialise(family, None, work)
        if mutant is not None:
            target = work / mutant.path
            target.write_text(mutant.apply(target.read_text(encoding="utf-8")), encoding="utf-8")
        probe = Defect(id=mutant.id if mutant else "clean", defect_class="mutant", description="a mutant", seeds=())
        request = GradeRequest(
            workdir=str(work),
            family=family,
            defect=probe,
            issued=issued,
            expected_tests=expected,
            acceptance_lock=lock,
            first_failure=mutant is not None,  # a mutant is killed at its first failing test or case
        )
        result, stages, collected = _stages(graders, request, limits)
        verdict = MutantResult(probe.id, result.outcome, result.grader, result.failure_mode, result.detail)
        return verdict, stages, collected
    finally:
        sweep_descendants()
        shutil.rmtree(scratch, ignore_errors=True)


def clean_run(
    family: TaskFamily, graders: Sequence[Grader], expected: tuple[str, ...], lock: AcceptanceLock | None = None
) -> CleanRun:
    """The clean tree through the staged chain, timed per grader (with no ``expected``, the suite discovers them)."""
    try:
        result, stages, collected = call_in_fork(
            _grade_tree, family, None, graders, expected, lock, None, temp_prefix="certlab-mutants-"
        )
    except ForkedCallError as error:
        return CleanRun(False, (), f"the clean tree could not be graded: {error.failure.summary}")
    seconds = tuple((stage.grader, stage.wall_s) for stage in stages)
    if result.killed:
        return CleanRun(False, seconds, f"the clean tree does not pass grader {result.grader}: {result.detail}")
    cpu = tuple((stage.grader, stage.cpu_s) for stage in stages)
    return CleanRun(True, seconds, collected=expected or collected, cpu_seconds=cpu)


def stage_limits(clean: CleanRun, minimum_s: float = MIN_STAGE_TIMEOUT_S) -> dict[str, StageLimits]:
    """Each grader's limits on a mutant: TIMEOUT_FACTOR times its wall and CPU time on the clean tree, at least
    ``minimum_s`` of each (the CPU limit in whole seconds, as RLIMIT_CPU counts them)."""
    cpu = dict(clean.cpu_seconds)
    return {
        name: StageLimits(
            wall_s=round(max(minimum_s, TIMEOUT_FACTOR * wall), 1),
            cpu_s=math.ceil(max(minimum_s, TIMEOUT_FACTOR * cpu.get(name, wall))),
        )
        for name, wall in clean.seconds
    }


def prove_by_mutation(
    family: TaskFamily,
    graders: Sequence[Grader],
    expected: tuple[str, ...],
    workers: int = 2,
    acceptance_lock: AcceptanceLock | None = None,
    mutants: Sequence[Mutant] | None = None,
    min_timeout_s: float = MIN_STAGE_TIMEOUT_S,
) -> MutationProof:
    """Grade every mutant of the family's clean tree (``workers`` at a time) and return the proof.

    ``expected`` are the visible tests the instrument's proof collected on the clean tree
    (empty: those the suite collects on it here). A family without a clean tree (a user
    task with no fixed tree given, see :func:`fixed_family`) has nothing to mutate: its
    proof says so.
    """
    started = time.monotonic()
    threshold, visible = family_threshold(family), family_visible_threshold(family)
    if not family.clean_tree:
        problem = f"task {family.name} has no fixed tree to mutate"
        return MutationProof(family.name, (), (), threshold, visible, problems=(problem,))
    chosen = tuple(family_mutants(family) if mutants is None else mutants)
    clean = clean_run(family, graders, expected, acceptance_lock)
    if not clean.passed:
        problem = f"family {family.name}: {clean.problem}"
        return MutationProof(family.name, chosen, (), threshold, visible, problems=(problem,))
    expected = clean.collected
    if not expected:
        problem = f"family {family.name}: no grader reported the visible tests of the clean tree"
        return MutationProof(family.name, chosen, (), threshold, visible, problems=(problem,))
    limits = stage_limits(clean, min_timeout_s)
    budget = sum(limit.wall_s for limit in limits.values()) + 30.0
    results: list[MutantResult | None] = [None] * len(chosen)
    problems: list[str] = []
    for index, outcome in map_in_forks(
        lambda m: _grade_tree(family, m, graders, expected, acceptance_lock, limits)[0],
        chosen,
        workers=workers,
        timeout=budget,
        temp_prefix="certlab-mutants-",  # a mutant's worker killed at its budget leaves its tree to be deleted here
    ):
        if isinstance(outcome, ChildFailure):
            outcome = MutantResult(chosen[index].id, "error", None, None, _short(outcome.summary))
        results[index] = outcome
    done = tuple(r for r in results if r is not None)
    problems.extend(f"mutant {r.mutant} could not be graded: {r.detail}" for r in done if r.outcome == "error")
    return MutationProof(
        family=family.name,
        mutants=chosen,
        results=done,
        threshold=threshold,
        visible_threshold=visible,
        stage_timeouts_s=tuple(sorted((name, limit.wall_s) for name, limit in limits.items())),
        stage_cpu_limits_s=tuple(sorted((name, limit.cpu_s) for name, limit in limits.items())),
        wall_s=round(time.monotonic() - started, 3),
        problems=tuple(problems),
        held_out_graders=tuple(sorted(held_out_names(graders))),
    )


# ----------------------------------------------------------------------------- what is recorded and printed


def survivor_diffs(family: TaskFamily, proof: MutationProof) -> list[tuple[Mutant, str]]:
    """Each surviving mutant with its diff against the clean tree."""
    tree = Path(family.tree_dir)
    texts: dict[str, str] = {}
    out = []
    for mutant in proof.survivors:
        if mutant.path not in texts:
            texts[mutant.path] = (tree / mutant.path).read_text(encoding="utf-8")
        out.append((mutant, mutant.diff(texts[mutant.path])))
    return out


def percent(score: float | None) -> str:
    return "n/a" if score is None else f"{100 * score:.1f}%"


def score_line(proof: MutationProof) -> str:
    """``47 mutants: the visible suite kills 95.7% (45), the suite and held-out cases 97.9% (46); 1 survives
    (thresholds: visible suite 80.0%, suite and held-out cases 90.0%)``."""
    if not proof.count:
        return "no mutant could be made (no Python file an agent may change)"
    return (
        f"{proof.count} mutants: the visible suite kills {percent(proof.suite_score)} ({proof.killed_by_suite}), "
        f"the suite and held-out cases {percent(proof.score)} ({proof.killed}); "
        f"{len(proof.survivors)} {'survives' if len(proof.survivors) == 1 else 'survive'} "
        f"(thresholds: visible suite {percent(proof.visible_threshold)}, "
        f"suite and held-out cases {percent(proof.threshold)})"
    )


def mutation_document(
    family: TaskFamily,
    proof: MutationProof,
    minimum: float | None,
    cache_key: str | None = None,
    cached: bool = False,
    minimum_visible: float | None = None,
) -> dict[str, Any]:
    """The bundle's record of a family's mutation proof (inside its ``instrument`` entry).

    ``source`` says whether its mutants were graded by this run or the measurement of the same inputs
    was taken from certlab's cache (``cache_key``, see ``certlab_mutation.cache``).
    ``visible_minimum`` is the visible suite's refusal floor in force (:func:`visible_minimum`).
    """
    return {
        "measured": True,
        "source": "cache" if cached else "graded",
        "cache_key": cache_key,
        "mutator": MUTATOR,
        "operators": list(OPERATORS),
        "taskset_sha256": taskset_sha256(family),
        "mutants": proof.count,
        "mutants_sha256": mutants_sha256(proof.mutants),
        "killed": proof.killed,
        "killed_by_suite": proof.killed_by_suite,
        "score": None if proof.score is None else round(proof.score, 4),
        "suite_score": None if proof.suite_score is None else round(proof.suite_score, 4),
        "threshold": proof.threshold,
        "visible_threshold": proof.visible_threshold,
        "minimum": minimum,
        "visible_minimum": visible_minimum(proof, minimum, minimum_visible)[0],
        "stage_timeouts_s": dict(proof.stage_timeouts_s),
        "stage_cpu_limits_s": dict(proof.stage_cpu_limits_s),
        "wall_s": proof.wall_s,
        "results": [
            {"mutant": r.mutant, "outcome": r.outcome, "grader": r.grader, "failure_mode": r.failure_mode}
            for r in proof.results
        ],
        "survivors": [{"mutant": m.id, "diff": diff} for m, diff in survivor_diffs(family, proof)],
        "problems": list(proof.problems),
    }


def verdicts_of(results: Sequence[dict[str, Any]] | Sequence[MutantResult]) -> dict[str, tuple[bool, str | None]]:
    """{mutant: (killed, grader)}: what a re-run must reproduce (a timeout and a failure of one grader are one kill)."""
    out: dict[str, tuple[bool, str | None]] = {}
    for result in results:
        if isinstance(result, MutantResult):
            out[result.mutant] = (result.killed, result.grader)
        else:
            out[str(result["mutant"])] = (result["outcome"] in ("failed", "timeout"), result["grader"])
    return out


def recheck(family: TaskFamily, recorded: dict[str, Any], proof: MutationProof) -> list[str]:
    """How a fresh mutation proof differs from the recorded one (empty: the recorded score is re-earned)."""
    differences: list[str] = []
    if recorded.get("mutator") != MUTATOR:
        return [f"the bundle's mutants were made by {recorded.get('mutator')!r}, this certlab makes {MUTATOR!r}"]
    if recorded.get("mutants_sha256") != mutants_sha256(proof.mutants):
        return [f"the mutants made now ({proof.count}) differ from the recorded ({recorded.get('mutants')})"]
    before = verdicts_of(recorded.get("results", []))
    now = verdicts_of(proof.results)
    for mutant in proof.mutants:
        if before.get(mutant.id) != now.get(mutant.id):
            was, is_now = before.get(mutant.id), now.get(mutant.id)
            differences.append(f"mutant {mutant.id}: recorded {_verdict_text(was)}, now {_verdict_text(is_now)}")
    return differences


def _verdict_text(verdict: tuple[bool, str | None] | None) -> str:
    if verdict is None:
        return "absent"
    killed, grader = verdict
    return f"killed by {grader}" if killed else "survived"


def _named(mutants: Sequence[Mutant]) -> str:
    return ", ".join(m.id for m in mutants[:12]) + (f" (+{len(mutants) - 12} more)" if len(mutants) > 12 else "")


def assessment(
    proof: MutationProof, minimum: float | None, minimum_visible: float | None = None
) -> tuple[list[str], list[str]]:
    """``(refusals, warnings)`` of both scores, each naming the mutants it let through.

    Below ``minimum`` (``--min-mutation-score``) the combined score refuses, below the visible floor
    (:func:`visible_minimum`) the visible suite's own score refuses; without a refusal, either score below
    the family's own threshold of it warns.
    """
    problems = [f"family {proof.family}: mutation proof: {p}" for p in proof.problems]
    if problems:
        return problems, []
    score = f"the suite and held-out cases kill {percent(proof.score)} of {proof.count} mutants"
    survivors = f"survivors: {_named(proof.survivors)}"
    visible = f"the visible suite alone kills {percent(proof.suite_score)} of {proof.count} mutants"
    through = f"it lets through: {_named(proof.suite_survivors)}"
    floor, source = visible_minimum(proof, minimum, minimum_visible)
    refusals = []
    if minimum is not None and proof.below(minimum):
        refusals.append(f"family {proof.family}: {score}, below --min-mutation-score {percent(minimum)}; {survivors}")
    if floor is not None and proof.suite_below(floor):
        refusals.append(
            f"family {proof.family}: {visible}, below {percent(floor)} ({source}): plausible wrong fixes pass "
            f"the tests an agent sees; {through}"
        )
    if refusals:
        return refusals, []
    warnings = []
    if proof.below(proof.threshold):
        warnings.append(f"family {proof.family}: {score}, below its threshold {percent(proof.threshold)}; {survivors}")
    if proof.suite_below(proof.visible_threshold):
        warnings.append(
            f"family {proof.family}: {visible}, below its visible threshold {percent(proof.visible_threshold)}: "
            f"plausible wrong fixes pass the tests an agent sees; {through}"
        )
    return [], warnings


def report_lines(family: TaskFamily, proof: MutationProof, diffs: bool = True) -> list[str]:
    """What ``certlab prove --mutants`` prints of one family: the scores, then each survivor as a diff."""
    lines = [f"mutants {proof.family}: {score_line(proof)} in {proof.wall_s:.1f} s"]
    timeouts = sum(1 for r in proof.results if r.outcome == "timeout")
    errors = sum(1 for r in proof.results if r.outcome == "error")
    if timeouts or errors:
        lines.append(f"mutants {proof.family}: {timeouts} killed at a time limit; {errors} not graded (a grader broke)")
    for mutant, diff in survivor_diffs(family, proof) if diffs else ():
        lines.append(f"survivor {mutant.id} ({mutant.operator}):")
        lines.extend("    " + line for line in diff.rstrip("\n").splitlines())
    return lines


# ----------------------------------------------------------------------------- a user task's fixed tree, the floors


def fixed_family(family: TaskFamily, fixed: Path, dest: Path) -> TaskFamily:
    """A user task with its fixed tree given: the fixed tree plus the task's visible tests, as a clean tree.

    ``fixed`` holds the task's fixture as it should be (the same layout); the mutants are
    made of its files an agent may change, and graded against the task's suite and cases.
    """
    from certlab_core.sdk.trees import visible_test_modules

    if not fixed.is_dir():
        raise UsageError(f"--fixed {fixed}: not a folder; give the fixed tree of the task (the fixture, fixed)")
    issued = Path(family.tree_dir)
    tree = dest / "tree"
    shutil.copytree(fixed, tree, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for test_path in family.test_paths:
        if (tree / test_path).exists():
            raise UsageError(f"--fixed {fixed}: it has a {test_path!r} entry, where the task's visible tests go")
        source = issued / test_path
        if source.is_dir():
            shutil.copytree(source, tree / test_path, symlinks=True)
        elif source.is_file():
            shutil.copy2(source, tree / test_path)
    if not visible_test_modules(tree, family.test_paths):
        raise UsageError(f"--fixed {fixed}: the task's visible tests could not be placed in it")
    return attrs.evolve(family, tree_dir=str(tree), clean_tree=True)


def check_minimum(minimum: float | None, flag: str = "--min-mutation-score", example: str = "0.9") -> None:
    if minimum is not None and not 0.0 <= minimum <= 1.0:
        raise UsageError(f"{flag} must be a share between 0 and 1 (got {minimum:g}), e.g. {example}")


def check_minimums(minimum: float | None, minimum_visible: float | None) -> None:
    """Both refusal floors are shares from 0 to 1; one line naming the flag otherwise."""
    check_minimum(minimum)
    check_minimum(minimum_visible, "--min-visible-mutation-score", "0.8")
