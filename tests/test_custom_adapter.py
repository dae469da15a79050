"""The custom adapter example: a complete adapter distribution in at most 20 lines, used as a third party would.

``examples/custom_adapter`` adapts ``fixbot``, a made-up agent CLI. Its Python files hold at
most 20 lines of code and import nothing of certlab but the author API; built into a wheel
and installed without network beside the fresh environment's certlab (see ``freshenv``),
it passes certlab's ``AdapterConformance`` and certifies the intervals family. When fixbot
is missing, the adapter's own words reach the console, the bundle and the contract.
"""

from __future__ import annotations

import ast
import io
import json
import os
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
from freshenv import REPO, FreshEnv, install_layers, run
from freshenv import shared_fresh_env as _shared_fresh_env

EXAMPLE = REPO / "examples" / "custom_adapter"
PACKAGE = "certlab_fixbot"
MAX_LINES_OF_CODE = 20

BUILD_WHEEL = """
import os, sys
from setuptools import build_meta
os.chdir(sys.argv[2])
print(build_meta.build_wheel(sys.argv[1]))
"""


def lines_of_code(source: str) -> int:
    """Lines holding code: no blank lines, no comments, no docstrings."""
    tree = ast.parse(source)
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            continue
        if token.type == tokenize.ENDMARKER:
            continue
        code.update(line for line in range(token.start[0], token.end[0] + 1) if line not in docstrings)
    return len(code)


def test_counting_lines_of_code_leaves_out_blanks_comments_and_docstrings() -> None:
    source = '"""Doc."""\n\n# a comment\nimport os  # why\n\n\ndef f():\n    """Doc\n    more."""\n    return os.sep\n'
    assert lines_of_code(source) == 3


def test_the_adapter_is_at_most_20_lines_and_imports_only_the_author_api() -> None:
    sources = sorted((EXAMPLE / PACKAGE).glob("*.py"))
    assert sources, "the example has no Python files"
    total = sum(lines_of_code(path.read_text()) for path in sources)
    assert 0 < total <= MAX_LINES_OF_CODE, f"{total} lines of code"
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for module in modules:
                if module.startswith("certlab"):  # the author API: the contract and the SDK, never the runtime
                    assert module == "certlab_core.plugin" or module.split(".")[:2] == ["certlab_core", "sdk"], (
                        f"{path.name} imports {module}"
                    )


@pytest.fixture(scope="session")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> FreshEnv:
    return _shared_fresh_env(tmp_path_factory)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example built into a wheel (setuptools' backend, no network) and installed into a folder of its own."""
    root = tmp_path_factory.mktemp("custom-adapter")
    source = root / "source"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    wheels = root / "wheels"
    built = subprocess.run(
        [sys.executable, "-c", BUILD_WHEEL, str(wheels), str(source)], capture_output=True, text=True, timeout=300
    )
    assert built.returncode == 0, built.stderr
    wheel = wheels / built.stdout.strip().splitlines()[-1]
    assert wheel.name == "certlab_adapter_fixbot-1.0.0-py3-none-any.whl"
    layer = root / "layer"
    install_layers({layer: [wheel]})
    return layer


def fixbot_env(fresh: FreshEnv, layer: Path, with_fixbot: bool = True) -> dict[str, str]:
    env = fresh.env(layers=[layer])
    if with_fixbot:
        env["PATH"] = f"{EXAMPLE}{os.pathsep}{env['PATH']}"
    return env


def test_installed_from_its_wheel_it_passes_the_adapter_conformance_suite(
    fresh: FreshEnv, installed: Path, tmp_path: Path
) -> None:
    shutil.copytree(EXAMPLE / "tests", tmp_path / "tests")
    shutil.copy2(EXAMPLE / "fixbot", tmp_path / "fixbot")  # where the tests look for the stand-in CLI
    completed = run(
        [str(fresh.bin / "pytest"), "-v", "-p", "no:cacheprovider", "tests"], cwd=tmp_path, env=fresh.env([installed])
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr
    passed = {line.split("::")[-1].split()[0] for line in completed.stdout.splitlines() if " PASSED" in line}
    assert passed == {
        "test_a_normal_run_completes_and_leaves_nothing_behind",
        "test_it_honours_the_timeout",
        "test_it_reports_its_own_infrastructure_failure_as_unavailable",
        "test_it_writes_nowhere_but_the_work_copy",
    }


def test_installed_from_its_wheel_it_certifies_intervals(fresh: FreshEnv, installed: Path, tmp_path: Path) -> None:
    out = tmp_path / "certification"
    argv = [str(fresh.bin / "certlab"), "certify", "--family", "intervals", "--agent", "fixbot", "--out", str(out)]
    completed = run([*argv, "--quiet"], env=fixbot_env(fresh, installed), cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert completed.stdout.startswith("certified: fixbot fixed 0/6 (0 unavailable)")
    bundle = json.loads((out / "bundle.json").read_text())
    assert bundle["agent"]["distribution"] == "certlab-adapter-fixbot"
    assert {t["agent_status"] for t in bundle["trials"]} == {"completed"}


def test_without_fixbot_its_own_words_reach_the_console_the_bundle_and_the_contract(
    fresh: FreshEnv, installed: Path, tmp_path: Path
) -> None:
    out = tmp_path / "certification"
    argv = [str(fresh.bin / "certlab"), "certify", "--family", "intervals", "--agent", "fixbot", "--out", str(out)]
    completed = run([*argv, "--quiet"], env=fixbot_env(fresh, installed, with_fixbot=False), cwd=tmp_path)
    assert completed.returncode == 3, completed.stdout + completed.stderr
    said = "fixbot is not on PATH; install it or add it to PATH"
    assert f"agent said: {said} (6 trial(s), first intervals/" in completed.stdout
    bundle = json.loads((out / "bundle.json").read_text())
    assert bundle["summary"]["unavailable"] == 6
    assert {t["failure_mode"] for t in bundle["trials"]} == {"agent-unavailable"}
    (detail,) = bundle["agent_details"]
    assert detail["detail"] == said and len(detail["trials"]) == 6
    assert said in (out / "CONTRACT.md").read_text()
