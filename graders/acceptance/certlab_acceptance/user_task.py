"""A user's own task, an experiment directory, read into a TaskFamily.

The directory holds ``certlab.yaml``, ``fixture/`` (the code, with a defect or a missing
feature), ``tests/`` (the visible tests), ``PROMPT.md`` and ``cases/acceptance.jsonl`` (the
held-out cases, never issued). ``certlab.yaml``'s ``task:`` mapping may rename any of them
and sets the edit policy; every key is optional::

    task:
      name: temperature              # default: the folder's name
      version: "1"
      description: "parse thermometer readings"
      fixture: fixture
      tests: tests
      prompt: PROMPT.md
      cases: cases/acceptance.jsonl
      allowed_paths: ["temperature.py"]   # default: the fixture's modules
      modules: ["temperature"]            # default: the fixture's top-level modules

The issued tree is the fixture with the tests folder inside it (as ``tests/``). There is
no clean tree: the task is proven by the issued tree failing its visible tests or its
held-out cases. Other top-level keys of ``certlab.yaml`` belong to the experiment (the
A/B gate) and are left alone here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import frozen

from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.sdk.containment import task_environments_dir
from certlab_core.sdk.trees import TreeTooLarge, copy_tree

#: The task source this layout is (``certlab_task_sources``).
SOURCE_NAME = "user-task"
TASK_FILE = "certlab.yaml"
TASK_KEYS = (
    "name",
    "version",
    "description",
    "fixture",
    "tests",
    "prompt",
    "cases",
    "allowed_paths",
    "modules",
    "defect_class",
    "oracle",
    "environment",
)
# Keys of the A/B gate's ``task:`` (certlab_core.gate.descriptor) that may share the mapping: a
# descriptor whose ``task: {family: NAME}`` names this directory's own task is its experiment.
GATE_TASK_KEYS = ("world", "input", "family", "defects", "twins")
DEFAULTS = {
    "fixture": "fixture",
    "tests": "tests",
    "prompt": "PROMPT.md",
    "cases": "cases/acceptance.jsonl",
    "version": "0",
    "defect_class": "user-task",
}
DEFECT_ID = "fixture"
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
NOT_MODULES = frozenset({"conftest", "setup", "__init__", "__main__"})
ENVIRONMENT_PATTERN = re.compile(r"^[0-9a-f]{16,64}$")


@frozen
class UserTask:
    """A user's task as read from its experiment directory (paths resolved, nothing staged yet)."""

    root: Path
    config_file: Path
    name: str
    version: str
    description: str
    fixture: Path
    tests: Path
    prompt: Path
    cases: Path
    allowed_paths: tuple[str, ...]
    module_names: tuple[str, ...]
    defect_class: str
    # The fixture as it should be (``task.oracle``, written by ``certlab task from-commit``), or None.
    oracle: Path | None = None
    # The task's own environment (``task.environment``, the id ``certlab task from-commit`` made it under in
    # ``task_environments_dir()``), or None: the agent environment's.
    environment: str | None = None

    @property
    def tests_name(self) -> str:
        """The name of the tests folder inside the issued tree."""
        return self.tests.name


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")
    return slug[:63] or "task"


def read_config(root: Path) -> dict[str, Any]:
    """The ``task:`` mapping of ``certlab.yaml`` (empty when absent); bad YAML is one line."""
    import yaml

    from certlab_core.sdk.safe_io import MAX_NESTING, nesting_depth, read_capped_text

    path = root / TASK_FILE
    missing = f"{path}: no {TASK_FILE}; create the task with 'certlab init-task {root}'"
    text = read_capped_text(path, TASK_FILE, UsageError, missing)  # a regular file of at most 16 MB
    if nesting_depth(text) > MAX_NESTING:
        raise UsageError(f"{path}: nested more than {MAX_NESTING} levels deep; a task's settings are a few levels")
    try:
        document = yaml.safe_load(text)
    except (ValueError, RecursionError) as error:  # a number of more digits than Python reads, deep block nesting
        raise UsageError(f"{path}: not a readable YAML document ({type(error).__name__}); fix the file") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "somewhere"
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise UsageError(f"{path}: {where}: not valid YAML ({problem})") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise UsageError(f"{path}: the top level must be a mapping (got {type(document).__name__})")
    task = document.get("task", {})
    if task is None:
        return {}
    if not isinstance(task, dict):
        raise UsageError(f"{path}: task: must be a mapping of the task's settings (got {type(task).__name__})")
    unknown = sorted(str(key) for key in task if key not in TASK_KEYS and key not in GATE_TASK_KEYS)
    if unknown:
        raise UsageError(f"{path}: task: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(TASK_KEYS)}")
    return task


def _text(config: Mapping[str, Any], key: str, path: Path, default: str) -> str:
    value = config.get(key, default)
    if isinstance(value, int | float) and not isinstance(value, bool) and key == "version":
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{path}: task.{key} must be a non-empty text (got {value!r})")
    return value


def _patterns(config: Mapping[str, Any], key: str, path: Path) -> tuple[str, ...] | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise UsageError(f"{path}: task.{key} must be a non-empty list of texts (got {value!r})")
    return tuple(value)


def _inside_root(root: Path, relative: str, key: str, path: Path) -> Path:
    candidate = Path(relative)
    if candidate.is_absolute() or ".." in candidate.parts:
        raise UsageError(f"{path}: task.{key} ({relative}) must be a path inside the experiment directory")
    return root / candidate


def fixture_modules(fixture: Path) -> tuple[str, ...]:
    """The fixture's top-level modules: its ``*.py`` files and its folders holding ``__init__.py``."""
    names: list[str] = []
    for entry in sorted(fixture.iterdir()):
        if entry.is_file() and entry.suffix == ".py" and entry.stem not in NOT_MODULES:
            names.append(entry.stem)
        elif entry.is_dir() and (entry / "__init__.py").is_file():
            names.append(entry.name)
    return tuple(names)


def load_user_task(directory: Path) -> UserTask:
    """Read an experiment directory's task; a missing part or a bad setting is one line (exit 4)."""
    if not directory.exists():
        raise UsageError(f"{directory}: no such experiment directory")
    if not directory.is_dir():
        raise UsageError(f"{directory}: not a directory; give the experiment directory holding {TASK_FILE}")
    root = directory.resolve()
    config_file = root / TASK_FILE
    config = read_config(root)
    default_name = config["family"] if isinstance(config.get("family"), str) else _slug(root.name)
    name = _text(config, "name", config_file, default_name)
    if not NAME_PATTERN.match(name):
        raise UsageError(
            f"{config_file}: task.name {name!r} must be lower-case letters, digits, '.', '_' or '-' (at most 63)"
        )
    parts = {
        key: _inside_root(root, _text(config, key, config_file, DEFAULTS[key]), key, config_file)
        for key in (
            "fixture",
            "tests",
            "prompt",
            "cases",
        )
    }
    for key, kind in (("fixture", "folder"), ("tests", "folder"), ("prompt", "file"), ("cases", "file")):
        target = parts[key]
        exists = target.is_dir() if kind == "folder" else target.is_file()
        if not exists:
            raise UsageError(f"{config_file}: task.{key}: {target} is not a {kind}; create it or fix the path")
    oracle = None
    if config.get("oracle") is not None:
        oracle = _inside_root(root, _text(config, "oracle", config_file, ""), "oracle", config_file)
        if not oracle.is_dir():
            raise UsageError(f"{config_file}: task.oracle: {oracle} is not a folder; give the fixed fixture or drop it")
    environment = None
    if config.get("environment") is not None:
        environment = _text(config, "environment", config_file, "")
        if not ENVIRONMENT_PATTERN.match(environment):
            raise UsageError(
                f"{config_file}: task.environment {environment[:80]!r} is not a task environment's id "
                "(16 to 64 hex digits); rebuild the task or drop the key"
            )
    modules = _patterns(config, "modules", config_file) or fixture_modules(parts["fixture"])
    if not modules:
        raise UsageError(
            f"{parts['fixture']}: no Python module at the top of the fixture; "
            f"add one or set task.modules in {TASK_FILE}"
        )
    allowed = _patterns(config, "allowed_paths", config_file) or tuple(
        f"{module}/*" if (parts["fixture"] / module).is_dir() else f"{module}.py" for module in modules
    )
    return UserTask(
        root=root,
        config_file=config_file,
        name=name,
        version=_text(config, "version", config_file, DEFAULTS["version"]),
        description=_text(config, "description", config_file, f"the user task in {root.name}"),
        fixture=parts["fixture"],
        tests=parts["tests"],
        prompt=parts["prompt"],
        cases=parts["cases"],
        allowed_paths=allowed,
        module_names=tuple(modules),
        defect_class=_text(config, "defect_class", config_file, DEFAULTS["defect_class"]),
        oracle=oracle,
        environment=environment,
    )


def _copy_task_part(src: Path, dest: Path) -> None:
    """Copy a task's fixture or tests, without bytecode, with a bounded walk (links kept as links)."""
    try:
        copy_tree(src, dest, skip=("__pycache__", "*.pyc"))
    except TreeTooLarge as error:
        raise UsageError(f"{src} holds {error.message}; a task must fit in a work copy") from None


def stage_family(task: UserTask, dest: Path) -> TaskFamily:
    """Build the issued tree (fixture plus tests) in ``dest`` and return the task as a TaskFamily."""
    tree = dest / "tree"
    if tree.exists() or tree.is_symlink():
        raise UsageError(f"{tree} already exists; a task is staged into a new folder")
    _copy_task_part(task.fixture, tree)
    if (tree / task.tests_name).exists():
        raise UsageError(
            f"{task.fixture}: the fixture already has a {task.tests_name!r} entry, where the visible tests go; "
            "rename it or move the tests"
        )
    _copy_task_part(task.tests, tree / task.tests_name)
    answer = None
    if task.oracle is not None:
        answer = dest / "answer"
        _copy_task_part(task.oracle, answer)
    environment = None
    if task.environment is not None:
        environment = task_environments_dir() / task.environment
        if not (environment / "pyvenv.cfg").is_file() or not (environment / "bin" / "python").exists():
            raise UsageError(
                f"{task.config_file}: the task's environment {task.environment} is not built here ({environment}); "
                "build the task again on this machine (certlab task from-commit)"
            )
    return TaskFamily(
        name=task.name,
        version=task.version,
        description=task.description,
        tree_dir=str(tree),
        prompt_file=str(task.prompt),
        cases_file=str(task.cases),
        allowed_paths=task.allowed_paths,
        test_paths=(task.tests_name,),
        module_names=task.module_names,
        defects=(
            Defect(
                id=DEFECT_ID,
                defect_class=task.defect_class,
                description="the fixture as issued: its defect or missing feature is the task",
                seeds=(),
            ),
        ),
        clean_tree=False,
        answer_dir=None if answer is None else str(answer),
        environment_dir=None if environment is None else str(environment),
    )


def holds_user_task(directory: Path) -> bool:
    """Whether ``directory`` is the experiment directory of a task of the user's own (its fixture and cases)."""
    if not (directory / TASK_FILE).is_file():
        return False
    try:
        config = read_config(directory)
    except UsageError:
        return True  # let the loader say what is wrong
    fixture = config.get("fixture", DEFAULTS["fixture"])
    cases = config.get("cases", DEFAULTS["cases"])
    return (
        isinstance(fixture, str)
        and isinstance(cases, str)
        and (directory / fixture).is_dir()
        and (directory / cases).is_file()
    )
