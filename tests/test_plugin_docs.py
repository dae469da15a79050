"""docs/plugins.md is what tools/plugin_docs.py makes of the hook specs: one section per hook, its example included."""

from __future__ import annotations

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_docs_plugins_md_is_generated_from_the_hook_specs() -> None:
    tool = runpy.run_path(str(ROOT / "tools" / "plugin_docs.py"))
    expected = tool["render"]()
    written = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    assert written == expected, "docs/plugins.md is stale: run .venv/bin/python tools/plugin_docs.py"
    for name, _fn in tool["specs"]():
        assert f"`{name}`" in written
    assert written.count("```python") == len(tool["specs"]())
