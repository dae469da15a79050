# make demo: set up .venv and run the demo; make test: set up .venv and run lint, types and every test suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed
WHEELHOUSE := .wheelhouse
PYPROJECTS := $(shell find . -name pyproject.toml -not -path './.venv/*' -not -path './.wheelhouse/*' -not -path '*/build/*' -not -path './certifications/*')
# Every package of ours that the type checker reads: the kernel and each plugin distribution's package.
TYPED_PACKAGES := certlab_core $(shell find task_families adapters graders plugins -mindepth 2 -maxdepth 2 -type d -name 'certlab_*' -not -name '*.egg-info' 2>/dev/null | sort)

.PHONY: demo test lint typecheck unit bytecode setup wheelhouse dist clean certifications chromium clis sandbox strace

setup: $(STAMP) chromium sandbox strace

# Made as the demo's is (see $(DEMO_STAMP) below), with the test tools: pip's own -r of this file built each editable
# distribution in an isolated environment of its own, with three setuptools processes each.
$(STAMP): requirements-dev.txt $(PYPROJECTS) tools/install_editables.py
	$(NEW_VENV)
	$(BIN)/python tools/install_editables.py requirements-dev.txt
	@touch $(STAMP) $(DEMO_STAMP)

# A local wheelhouse, so the tests can install a third party's family into a fresh environment without network.
# Rebuilt when any file of our packages changes; setuptools' build/ folders go first, as they keep deleted files.
WHEEL_SOURCES := $(shell find $(TYPED_PACKAGES) -type f -not -path '*/__pycache__/*' -not -name '*.pyc' 2>/dev/null)
# tools/build_wheelhouse.py builds our wheels in one process (pip wheel starts three setuptools processes for each).
$(WHEELHOUSE)/.built: $(STAMP) $(WHEEL_SOURCES) tools/build_wheelhouse.py
	@rm -rf $(WHEELHOUSE) && mkdir -p $(WHEELHOUSE)
	@rm -rf $$(sed -n 's|^-e \(.*\)|\1/build|p' requirements-dev.txt)
	$(BIN)/python tools/build_wheelhouse.py requirements-dev.txt $(WHEELHOUSE)
	@touch $(WHEELHOUSE)/.built

wheelhouse: $(WHEELHOUSE)/.built

# Every distribution of this repository as a wheel in dist/, certlab-all among them (the kernel and every
# built-in plugin), until they are published: pip install --find-links dist certlab-all
# It needs only what building needs: a small venv with the build backend, not the development venv.
BUILD_VENV := .venv-build
$(BUILD_VENV)/.installed:
	@test -x $(BUILD_VENV)/bin/python || $(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/python -m pip install -q --upgrade pip 'setuptools>=77' wheel
	@touch $@

dist: $(BUILD_VENV)/.installed
	@rm -rf dist && mkdir -p dist
	@rm -rf $$(sed -n 's|^-e \(.*\)|\1/build|p' requirements-dev.txt)
	$(BUILD_VENV)/bin/python -m pip wheel -q --no-deps --no-build-isolation -w dist $$(sed -n 's/^-e \(.*\)/\1/p' requirements-dev.txt)
	@echo "dist: $$(ls dist/*.whl | wc -l) wheels; install with: pip install --find-links dist certlab-all"

chromium:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "make: chromium is missing and apt-get could not install it; the HTML report's browser test needs it"

# strace watches the real agent CLIs' connect calls in their tests (no connection but to the model boundary):
# installed from Debian when missing and apt-get works.
strace:
	@command -v strace >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null; } || \
	  echo "make: strace is missing and apt-get could not install it; the real CLIs' connection tests will skip"

# The bwrap sandbox: bubblewrap from Debian when missing and apt-get works, and the agent environment (a venv with
# pytest and nothing of certlab, in the user's cache) made once; either missing makes --sandbox auto run uncontained.
sandbox: $(STAMP)
	@command -v bwrap >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } || \
	  echo "make: bubblewrap is missing and apt-get could not install it; the sandbox tests will be skipped"
	@$(BIN)/python -c "from certlab_sandbox_bwrap.plugin import agent_python; agent_python()" || \
	  echo "make: the agent environment could not be made; the sandbox tests will be skipped"

# The real agent CLIs the real-agent tests drive, pinned, in a cache outside the repository (tools/install_clis.sh).
CLI_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/certlab/clis
CLAUDE_CODE_VERSION := 2.1.197
CODEX_VERSION := 0.171.0
AIDER_VERSION := 0.86.2
clis: $(STAMP)
	@sh tools/install_clis.sh "$(CLI_CACHE)" $(BIN)/python $(CLAUDE_CODE_VERSION) $(CODEX_VERSION) $(AIDER_VERSION)

# The demo needs only the distributions it runs (requirements-demo.txt), not the test tools: a quicker first setup,
# measured by bench/demo.py. The venv is made without ensurepip (which installs and compiles an older pip and
# setuptools); the system's pip puts the current pip and setuptools in without compiling (ensurepip when that pip
# is too old for --python). tools/install_editables.py builds our editable wheels in one process (pip starts three
# setuptools processes for each), one pip run installs them and their third-party dependencies, and what can be
# imported is compiled to bytecode on every CPU (pip compiles one file after another, test folders included).
# A full setup (requirements-dev.txt) includes them and stamps both.
SETUPTOOLS_FOR_SPDX := setuptools>=77
define NEW_VENV
@test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV)
@$(BIN)/python -c "import pip, setuptools, sys; sys.exit(int(setuptools.__version__.split('.')[0]) < 77)" 2>/dev/null || \
  $(PYTHON) -m pip --python $(BIN)/python install -q --no-compile --upgrade pip "$(SETUPTOOLS_FOR_SPDX)" 2>/dev/null || \
  { $(BIN)/python -m ensurepip -q && $(BIN)/python -m pip install -q --no-compile --upgrade pip "$(SETUPTOOLS_FOR_SPDX)"; }
endef
$(DEMO_STAMP): requirements-demo.txt $(PYPROJECTS) tools/install_editables.py
	$(NEW_VENV)
	$(BIN)/python tools/install_editables.py requirements-demo.txt
	@touch $(DEMO_STAMP)

# make demo DEMO_JOBS=1 runs the steps one after another (default: certlab demo's, one per CPU).
demo: $(DEMO_STAMP)
	$(BIN)/certlab demo $(if $(DEMO_JOBS),--jobs $(DEMO_JOBS))

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The kernel and every plugin distribution are checked strictly, the plugins against the contract as a third
# party's would be (tests/test_hookspec_examples.py holds the docs' examples to the same). mypy's cache is kept
# outside the repository, beside the CLIs', so a fresh clone checks only what changed (15 s cold, under 1 s warm;
# mypy checks each cached module against its source's hash, so a stale entry is never used).
MYPY_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/certlab/mypy
typecheck: $(STAMP)
	$(BIN)/mypy --strict --cache-dir "$(MYPY_CACHE)" certlab_core
	$(BIN)/mypy --strict --cache-dir "$(MYPY_CACHE)" $(filter-out certlab_core,$(TYPED_PACKAGES))

# Our packages are compiled to bytecode first (only what changed since): pip installs the editable ones without
# it, and where PYTHONDONTWRITEBYTECODE is set every interpreter the tests start (the CLI, zygotes, graders) would
# compile every certlab module it imports again, about a third of a short command's CPU. The seeded trees and
# test folders are left out, as tools/install_editables.py leaves them out for the demo.
# pip and setuptools too: the venv is made without compiling them (the demo never imports them), and the tests run
# pip and setuptools' backend again and again (wheels, fresh environments), about 0.2 CPU-s more a run uncompiled.
NOT_IMPORTED := /(tests?|examples|fixture|family)/
SITE_PACKAGES = $(shell $(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 -x '$(NOT_IMPORTED)' $(TYPED_PACKAGES) \
	  $(wildcard $(addprefix $(SITE_PACKAGES)/,pip setuptools pkg_resources _distutils_hack)) >/dev/null

# pytest runs with a temp folder of its own (tools/suite_temp.py): anything but pytest's own folder left in it
# fails the run, for certlab deletes only what it made.
# Three xdist workers on a 2-core machine: many tests wait (an agent CLI's retries, a timeout that must trip,
# a stop that must land), and with two workers a core idled through each wait. Same code, one after the
# other, fresh clones: pytest 780.8 s with 2, 727.3 s with 3, the same CPU. make test PYTEST_WORKERS=N.
PYTEST_WORKERS ?= 3
unit: $(STAMP) $(WHEELHOUSE)/.built chromium clis sandbox strace bytecode
	CERTLAB_WHEELHOUSE=$(CURDIR)/$(WHEELHOUSE) CERTLAB_MYPY_CACHE="$(MYPY_CACHE)" $(BIN)/python tools/suite_temp.py \
	  $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=12

test: lint typecheck unit

certifications: $(STAMP)
	$(BIN)/python tools/publish_certifications.py

clean:
	rm -rf $(VENV) $(BUILD_VENV) $(WHEELHOUSE) dist
