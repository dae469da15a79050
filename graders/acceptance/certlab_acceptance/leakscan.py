"""``certlab leakscan``: each artefact of a run holding most held-out answers.

An artefact holds a case's answer when the case's input (its arguments, or its id) and its
answer (the expected value, or the exception name of a ``raises`` case) appear close to
each other in it, whatever the notation: JSON or Python, quotes, brackets, spacing,
``True``/``true`` and escaping are all read alike. That is what a copy of the cases file,
a lookup table of answers, a transcript that printed the cases, or a test written from
them looks like, while an answer alone (``10``, ``true``) proves nothing. Every file under
the run folder is read, and inside JSON documents every ``*_b64`` field (the recorded
changes of a certification bundle) is decoded and read as an artefact of its own.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from attrs import frozen

from certlab_acceptance.cases import HeldOutCase
from certlab_core.plugin import InstrumentError
from certlab_core.plugin.types.grader import Change
from certlab_core.sdk import safe_io, trees

WINDOW = 160
MAX_FILE_BYTES = 64 * 1024 * 1024
_WORDS = {"True": "true", "False": "false", "None": "null"}
_WORD_PATTERN = re.compile(r"\b(True|False|None)\b")
_SQUASH = str.maketrans({"'": '"', "(": "[", ")": "]", "\\": None})
_SPACE_AT_PUNCTUATION = re.compile(r'\s*([\[\]{},:"])\s*')
_SPACES = re.compile(r"\s+")
_WORDISH = re.compile(r"[\w.]")


@frozen
class Finding:
    """One artefact and how many of the held-out answers it holds."""

    artefact: str
    found: int
    total: int

    @property
    def majority(self) -> bool:
        return self.found * 2 > self.total


def squash(text: str) -> str:
    """One notation for JSON and Python text: double quotes, square brackets, lower-case literals, and no
    spacing around punctuation (a run of spaces between words becomes one)."""
    text = _WORD_PATTERN.sub(lambda m: _WORDS[m.group(1)], text).translate(_SQUASH)
    return _SPACES.sub(" ", _SPACE_AT_PUNCTUATION.sub(r"\1", text))


def _rendered(value: Any) -> str:
    return squash(json.dumps(value, ensure_ascii=False, sort_keys=False))


def _bounded(token: str) -> re.Pattern[str]:
    before = r"(?<![\w.])" if _WORDISH.match(token[:1]) or token[:1] == "-" else ""
    after = r"(?![\w.])" if _WORDISH.match(token[-1:]) else ""
    return re.compile(before + re.escape(token) + after)


@frozen
class AnswerPattern:
    """How one case's answer shows in a text: one of its input tokens near its answer token."""

    case_id: str
    inputs: tuple[re.Pattern[str], ...]
    answer: re.Pattern[str]

    def found_in(self, text: str) -> bool:
        for pattern in self.inputs:
            for hit in pattern.finditer(text):
                start, end = max(0, hit.start() - WINDOW), hit.end() + WINDOW
                if self.answer.search(text, start, end):
                    return True
        return False


def answer_patterns(cases: Sequence[HeldOutCase]) -> list[AnswerPattern]:
    patterns: list[AnswerPattern] = []
    for case in cases:
        inputs: list[str] = [_rendered(case.id)]
        if case.args:
            rendered = _rendered(list(case.args))
            inputs.append(rendered[1:-1] if len(rendered) > 2 else rendered)
        if case.kwargs:
            rendered = _rendered(dict(case.kwargs))
            inputs.append(rendered[1:-1])
        answer = case.raises if case.raises is not None else _rendered(case.expect)
        patterns.append(AnswerPattern(case.id, tuple(_bounded(token) for token in inputs if token), _bounded(answer)))
    return patterns


def count_answers(text: str, patterns: Sequence[AnswerPattern]) -> int:
    squashed = squash(text)
    return sum(1 for pattern in patterns if pattern.found_in(squashed))


def _decoded_fields(document: Any, where: str) -> Iterator[tuple[str, str]]:
    """(label, text) for every ``*_b64`` string field in a JSON document."""
    stack: list[tuple[Any, str]] = [(document, where)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                child = f"{path}.{key}"
                if isinstance(value, str) and str(key).endswith("_b64") and value:
                    try:
                        data = base64.b64decode(value, validate=True)
                    except (binascii.Error, ValueError):
                        continue
                    label = f"{path} ({node['path']})" if isinstance(node.get("path"), str) else child
                    yield label, data.decode("utf-8", "replace")
                else:
                    stack.append((value, child))
        elif isinstance(node, list):
            stack.extend((item, f"{path}[{index}]") for index, item in enumerate(node))


def artefacts(path: Path, shown: str) -> Iterator[tuple[str, str]]:
    """(label, text) of one file, and of every encoded field inside it when it is JSON or JSON lines."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES)
    except OSError:
        return
    text = data.decode("utf-8", "replace")
    yield shown, text
    # Parsed under safe_io's caps (nesting, huge integers): what is not such JSON is read as text only.
    if path.suffix == ".json":
        yield from _decoded_fields(safe_io.parse_line(text), shown)
    elif path.suffix == ".jsonl":
        for number, line in enumerate(text.splitlines(), start=1):
            yield from _decoded_fields(safe_io.parse_line(line), f"{shown}:{number}")


#: The most a scanned folder (a run store, a certification, a task) may hold: its walk is bounded by them.
SCAN_CAPS = trees.TreeCaps(max_bytes=1 << 40, max_files=200_000, max_depth=64, max_path=4096)


def walk_files(root: Path) -> Iterator[Path]:
    """Every regular file below ``root`` (links not followed), by a bounded walk; one line past :data:`SCAN_CAPS`."""
    if root.is_file():
        yield root
        return
    try:
        files = [e.path for e in trees.walk(root, SCAN_CAPS) if e.kind == "file"]
    except trees.TreeTooLarge as error:
        raise InstrumentError(f"{root} holds {error.message}; leakscan reads no folder that large") from None
    yield from files


def scan_paths(roots: Sequence[Path], cases: Sequence[HeldOutCase], shown_from: Path) -> list[Finding]:
    """Every artefact under ``roots`` holding at least one answer, most answers first."""
    patterns = answer_patterns(cases)
    findings: list[Finding] = []
    for root in roots:
        for file in walk_files(root):
            try:
                shown = file.relative_to(shown_from).as_posix()
            except ValueError:
                shown = str(file)
            for label, text in artefacts(file, shown):
                found = count_answers(text, patterns)
                if found:
                    findings.append(Finding(label, found, len(patterns)))
    return sorted(findings, key=lambda f: (-f.found, f.artefact))


def leaked_by_changes(changes: Sequence[Change], cases: Sequence[HeldOutCase]) -> Finding | None:
    """The held-out answers an agent's recorded changes hold, when they hold over half of them (else None).

    A case counts when any one changed file holds it (its input near its answer, as ``certlab leakscan``
    reads them); a symlink's target, a deletion and a change kept as its hash only hold nothing.
    """
    patterns = answer_patterns(cases)
    if not patterns:
        return None
    texts = [
        base64.b64decode(change.content_b64).decode("utf-8", "replace")
        for change in changes
        if change.content_b64 and change.kind != "symlink" and not change.omitted
    ]
    found = sum(1 for pattern in patterns if any(pattern.found_in(squash(text)) for text in texts))
    finding = Finding("the trial's changes", found, len(patterns))
    return finding if finding.majority else None


def answers_leaked(changes: Sequence[Change], cases_file: str | None) -> bool:
    """Whether a graded trial's changes hold over half of the held-out answers in ``cases_file``.

    The certification engine fails such a trial as ``answers-leaked`` (and regrade re-earns that): an agent
    that wrote the answer key into the work copy read it, whatever its tests say. A missing or unreadable
    cases file holds no answers to leak.
    """
    from certlab_acceptance.cases import read_cases
    from certlab_core.plugin import CertlabError

    if not cases_file or not os.path.isfile(cases_file):
        return False
    try:
        cases = read_cases(Path(cases_file))
    except CertlabError:
        return False
    return leaked_by_changes(changes, cases) is not None
