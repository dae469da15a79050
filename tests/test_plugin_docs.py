"""docs/plugins.md is what tools/plugin_docs.py makes of the code: one section per hook, its example and its
conformance kit included, then a reference of every record's fields, protocol's signature and SDK function's
parameters."""

from __future__ import annotations

import inspect
import runpy
from pathlib import Path

import attrs

import certlab_core.plugin as api

ROOT = Path(__file__).resolve().parent.parent


def test_docs_plugins_md_is_generated_from_the_hook_specs() -> None:
    tool = runpy.run_path(str(ROOT / "tools" / "plugin_docs.py"))
    expected = tool["render"]()
    written = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    assert written == expected, "docs/plugins.md is stale: run .venv/bin/python tools/plugin_docs.py"
    hooks, _, _reference = written.partition(tool["REFERENCE"] + "\n")
    for name, _fn in tool["specs"]():
        assert f"`{name}`" in hooks
    kits = tool["KITS"]
    assert hooks.count("```python") == len(tool["specs"]()) + len(kits)  # each hook's example, each kit's
    for hook, kit in kits.items():
        hook_section = hooks.split(f"`{hook}`\n", 1)[1].split("\n## ", 1)[0]
        assert f"### Testing it: `certlab_core.testing.{kit.__name__}`" in hook_section, hook


def test_the_reference_lists_every_records_fields_and_every_sdk_functions_parameters() -> None:
    tool = runpy.run_path(str(ROOT / "tools" / "plugin_docs.py"))
    _hooks, _, reference = tool["render"]().partition(tool["REFERENCE"] + "\n")
    # each record's or protocol's section, by name
    sections = {block.split("`", 1)[0]: block for block in reference.split("\n#### `")[1:]}
    for name in api.__all__:
        value = getattr(api, name)
        if isinstance(value, type) and attrs.has(value):
            assert name in sections, f"the reference has no section for the record {name}"
            for field in attrs.fields(value):
                assert f"| `{field.name}` | `" in sections[name], f"{name}.{field.name} is missing"
        elif isinstance(value, type) and getattr(value, "_is_protocol", False):
            assert name in sections, f"the reference has no section for the protocol {name}"
    assert "| `arm_alpha` | `ArmAlpha \\| None` | `None` |" in sections["StatisticalRule"]
    assert "`AgentStatus` is one of `completed`, `timeout`, `unavailable`, `crashed`." in sections["AgentOutcome"]
    for _title, functions in tool["sdk_functions"]():
        for name, function in functions:
            parameters = inspect.signature(function).parameters
            assert f"{name}(" in reference and all(f"{p}" in reference for p in parameters), name
    run_command = reference.split("\nrun_command(", 1)[1].split("\n)", 1)[0]
    assert "readable: Iterable[str] = ()" in run_command and "writable: Iterable[str] = ()" in run_command
    for module in ("safe_io", "trees", "canonical"):
        assert f"### SDK functions: `certlab_core.sdk.{module}`" in reference


def test_the_page_is_the_same_once_any_code_resolved_the_records_types() -> None:
    """CI saw ``Literal`` where ``TrialVerdict`` is written: cattrs, in an earlier test of the same worker, had
    resolved the records' annotations (``attrs.resolve_types``), and the page read the resolved objects."""
    tool = runpy.run_path(str(ROOT / "tools" / "plugin_docs.py"))
    for name in api.__all__:
        value = getattr(api, name)
        if isinstance(value, type) and attrs.has(value):
            try:
                attrs.resolve_types(value)
            except NameError:  # an annotation only type checkers can resolve
                continue
    written = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    assert tool["render"]() == written
