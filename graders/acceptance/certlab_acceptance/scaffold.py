"""``certlab init-task``: scaffold a small, working user task."""

from __future__ import annotations

from pathlib import Path

from certlab_acceptance.user_task import NAME_PATTERN, TASK_FILE
from certlab_core.plugin.errors import UsageError

CONFIG = """\
# A task of your own for certlab. Certify an agent on it:
#   certlab lock .            (seal the held-out cases; refuses a layout that leaks them)
#   certlab certify --task . --agent command --agent-arg "YOUR AGENT COMMAND" --out cert/
# Every key of task: is optional; the values below are the defaults, except name and allowed_paths.
#
# The same folder can be the task of an A/B experiment (certlab run certlab.yaml): replace this
# file with an experiment descriptor (see certlab schema) whose task names this one,
#   task: {{family: {name}}}
#   oracle: graders
#   arms: {{baseline: {{adapter: command, args: ["..."]}}, candidate: {{adapter: command, args: ["..."]}}}}
# and keep fixture/, tests/, PROMPT.md and cases/ where they are (the default layout).
task:
  name: {name}
  version: "1"
  description: "parse thermometer readings and convert Fahrenheit to Celsius"
  fixture: fixture                 # the code as issued to the agent, with its defect
  tests: tests                     # the visible tests, issued as tests/
  prompt: PROMPT.md                # what the agent is told
  cases: cases/acceptance.jsonl    # held-out cases: never issued, scored in a separate process
  allowed_paths: ["temperature.py"]  # what the agent may change (fnmatch patterns, relative to the fixture)
"""

PROMPT = """\
The tests in `tests/` fail. Fix `temperature.py` so that they pass.

Do not change the tests, and do not add files: only `temperature.py` may change.
Readings look like `21.5C`, `-3c` or `70F` (spaces around them are allowed); temperatures
are returned in Celsius, rounded to two decimals.
"""

MODULE = '''\
"""Thermometer readings: parse "21.5C" or "70F" and convert them to Celsius."""

from __future__ import annotations


def fahrenheit_to_celsius(fahrenheit: float) -> float:
    """Degrees Fahrenheit in degrees Celsius, rounded to two decimals."""
    return round(fahrenheit - 32 * 5 / 9, 2)


def parse_reading(text: str) -> float:
    """The temperature in Celsius of a reading such as "21.5C", "-3c" or " 70F "; ValueError when unreadable."""
    reading = text.strip()
    if len(reading) < 2 or reading[-1].upper() not in ("C", "F"):
        raise ValueError(f"not a temperature reading: {text!r}")
    number = float(reading[:-1])
    if reading[-1].upper() == "F":
        return fahrenheit_to_celsius(number)
    return round(number, 2)
'''

TESTS = '''\
"""Visible tests of the temperature module."""

import pytest

from temperature import fahrenheit_to_celsius, parse_reading


def test_boiling_point():
    assert fahrenheit_to_celsius(212) == 100.0


def test_freezing_point():
    assert fahrenheit_to_celsius(32) == 0.0


def test_celsius_reading_is_kept():
    assert parse_reading("21.5C") == 21.5


def test_fahrenheit_reading_is_converted():
    assert parse_reading("50F") == 10.0


def test_unreadable_reading_is_refused():
    with pytest.raises(ValueError):
        parse_reading("warm")
'''

CASES = """\
{"id": "body-temperature", "call": "temperature:parse_reading", "args": ["98.6F"], "expect": 37.0}
{"id": "minus-forty", "call": "temperature:parse_reading", "args": ["-40F"], "expect": -40.0}
{"id": "lower-case-unit", "call": "temperature:parse_reading", "args": ["-3c"], "expect": -3.0}
{"id": "spaces-around", "call": "temperature:parse_reading", "args": ["  68F "], "expect": 20.0}
{"id": "oven", "call": "temperature:fahrenheit_to_celsius", "args": [356], "expect": 180.0}
{"id": "unit-only", "call": "temperature:parse_reading", "args": ["F"], "raises": "ValueError"}
{"id": "no-unit", "call": "temperature:parse_reading", "args": ["21.5"], "raises": "ValueError"}
"""

FILES = {
    TASK_FILE: CONFIG,
    "PROMPT.md": PROMPT,
    "fixture/temperature.py": MODULE,
    "tests/test_temperature.py": TESTS,
    "cases/acceptance.jsonl": CASES,
}


def scaffold(directory: Path, name: str | None = None) -> list[Path]:
    """Write the example task into ``directory`` (new or empty); return the files written."""
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise UsageError(f"{directory} already exists and is not an empty folder; choose a new one")
    task_name = name or directory.resolve().name.lower()
    if not NAME_PATTERN.match(task_name):
        raise UsageError(
            f"the task name {task_name!r} must be lower-case letters, digits, '.', '_' or '-'; give one with --name"
        )
    written: list[Path] = []
    for relpath, text in FILES.items():
        path = directory / relpath
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.format(name=task_name) if relpath == TASK_FILE else text, encoding="utf-8")
        except OSError as failure:
            said = f"{path}: cannot write the task ({failure.strerror}); choose a folder you can write"
            raise UsageError(said) from None
        written.append(path)
    return written
