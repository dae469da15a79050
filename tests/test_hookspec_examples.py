"""Every hook spec documents a complete example plugin; each example is run and must yield its records."""

from __future__ import annotations

import inspect
import textwrap
import types
import typing

import pytest

from certlab_core.plugin import hookspecs, records
from certlab_core.plugin.registry import HOOK_PREFIX, KINDS, discover

MARKER = "Example plugin::"


def specs() -> list[tuple[str, types.FunctionType]]:
    return [
        (name, fn)
        for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith(HOOK_PREFIX) and hasattr(fn, "certlab_spec")
    ]


def example_of(fn: types.FunctionType) -> str:
    doc = inspect.getdoc(fn) or ""
    assert MARKER in doc, f"{fn.__name__}: its docstring has no '{MARKER}' block"
    block = doc.split(MARKER, 1)[1]
    lines = []
    for line in block.splitlines()[1:]:
        if line.strip() and not line.startswith("    "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines))


def record_type(fn: types.FunctionType) -> type:
    hints = typing.get_type_hints(fn, {**vars(records), **vars(hookspecs)})
    (inner,) = typing.get_args(hints["return"])
    return inner  # type: ignore[no-any-return]


def test_every_kind_has_a_spec() -> None:
    assert {name[len(HOOK_PREFIX) :] for name, _ in specs() if name[len(HOOK_PREFIX) :] in KINDS} == set(KINDS)


@pytest.mark.parametrize(("name", "spec"), specs(), ids=[name for name, _ in specs()])
def test_example_plugin_yields_its_records(name: str, spec: types.FunctionType) -> None:
    source = example_of(spec)
    module = types.ModuleType(f"example_{name}")
    exec(compile(source, module.__name__, "exec"), module.__dict__)
    assert hasattr(module, name), f"the example of {name} does not implement {name}"
    registry = discover(only=(), extra=[(module.__name__, module)])
    produced = getattr(registry.pm.hook, name)()
    flat = [record for batch in produced for record in batch]
    assert flat, f"the example of {name} yields nothing"
    expected = record_type(spec)
    for record in flat:
        assert isinstance(record, expected), f"{name} example yields {type(record).__name__}, not {expected.__name__}"
    kind = name[len(HOOK_PREFIX) :]
    if kind in KINDS:
        for record in flat:
            assert registry.get(kind, record.name) == record
