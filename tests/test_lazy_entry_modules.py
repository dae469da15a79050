"""Discovery imports each plugin's entry module, not its implementation: the heavy modules wait until used.

``discover()`` runs in a fresh interpreter of this environment (every plugin of the
repository installed); afterwards none of the implementation modules below, nor the
standard library they bring, may be in ``sys.modules``. The reporters' deferred ``render``
still writes a report.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BLOCK_STORE = Path(__file__).parent / "archived_stores" / "block"

# plugin entry point name -> modules its entry module imports only when a record's callable runs
DEFERRED = {
    "model-boundary": ("certlab_model_boundary.proxy", "http.server", "http.client", "ssl"),
    "report-html": ("certlab_report_html.render",),
    "report-junit": ("certlab_report_junit.render", "xml.etree.ElementTree"),
    "report-markdown": ("certlab_report_markdown.render",),
    "report-text": ("certlab_report_text.render",),
    "suite": ("certlab_suite.suite_server", "certlab_suite.visible_suite"),
    "sandbox-bwrap": ("certlab_sandbox_bwrap.slots", "certlab_sandbox_bwrap.inner_relay"),
    "command": ("certlab_core.sdk.command",),
    "signing": ("certlab_signing.commands", "certlab_signing.evidence"),
    "compare": (
        "certlab_compare.command",
        "certlab_compare.publication",
    ),  # run_command, also what the real CLI adapters run through
}

DISCOVER_AND_LIST = """
import json, sys
from certlab_core._runtime.registry import discover
registry = discover()
print(json.dumps({"loaded": [info.name for info in registry.plugins()],
                  "failures": [failure.entry_point for failure in registry.failures],
                  "modules": sorted(sys.modules)}))
"""


def test_discover_imports_no_plugin_implementation() -> None:
    done = subprocess.run([sys.executable, "-c", DISCOVER_AND_LIST], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    assert found["failures"] == []
    assert set(DEFERRED) <= set(found["loaded"]), "the plugins whose laziness is checked must be installed"
    imported = set(found["modules"])
    early = {plugin: [m for m in modules if m in imported] for plugin, modules in DEFERRED.items()}
    assert {plugin: modules for plugin, modules in early.items() if modules} == {}


def test_reporters_render_through_their_records() -> None:
    """Each deferred ``render`` imports its renderer on the first call and writes the archived block store's report."""
    from certlab_core._runtime.registry import discover
    from certlab_core.report.reading import load_report

    registry = discover()
    report, rule = load_report(BLOCK_STORE, registry, (1, 2, 4))
    texts = {
        name: registry.get("reporters", name).render(report, rule) for name in ("markdown", "junit", "html", "text")
    }
    assert (
        texts["text"].startswith("experiment ")
        and "BLOCK" in texts["markdown"]
        and "<testsuite" in texts["junit"]
        and "<svg" in texts["html"]
    )


# A certlab command as the CLI runs it, then the modules it imported: certlab_core.cli's main, with its exit caught.
COMMAND_AND_LIST = """
import json, sys
from certlab_core.cli import main
sys.argv = ["certlab", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


def test_a_command_does_not_import_pydantic() -> None:
    """typer 0.29 imports pydantic to coerce every command's options: 0.15 CPU-s more for each certlab command
    (bench/startup.py: certlab diff 0.81 s against 0.57 s), and the suite starts certlab hundreds of times."""
    for args in (["plugins"], ["diff", str(BLOCK_STORE), "baseline/clean/0", "candidate/clean/0"]):
        done = subprocess.run([sys.executable, "-c", COMMAND_AND_LIST, *args], capture_output=True, text=True)
        modules = json.loads(done.stdout.strip().splitlines()[-1])
        assert done.returncode == 0 and "certlab_core.cli" in modules, done.stderr
        assert [m for m in modules if m.split(".")[0] in ("pydantic", "pydantic_core")] == [], args
