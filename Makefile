# Attention, taught and graded.  `make help` lists the targets.
#
# Every target that needs Python creates .venv/ on first use and reinstalls the project into it
# whenever pyproject.toml changes (the stamp file $(VENV)/.installed records the last install).
# Run make from the repository root (or with `make -C path/to/repo`).

SHELL := /bin/bash
.DEFAULT_GOAL := help

MAKEFILE := $(abspath $(lastword $(MAKEFILE_LIST)))
# The repository (where this Makefile is); ROOT is the course `make lab` serves, the same unless
# set on the command line (tests serve a scratch copy of the course with ROOT=...).
REPO_DIR := $(patsubst %/,%,$(dir $(MAKEFILE)))
ROOT := $(REPO_DIR)

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Installed by Jupyter (jupyter-events asks for jsonschema[format-nongpl]) and removed again:
# rfc3987-syntax compiles its grammars when jsonschema is imported, 2-3 s of CPU in every Jupyter
# server, nbgrader command and notebook reader that starts (jsonschema issue #1392), for the "iri"
# format checks no schema here uses; without it jsonschema skips them (docs/instructors.md).
SLOW_IMPORTS := rfc3987-syntax
# nbgrader runs `alembic` (and we run jupyter, ruff, pytest) from PATH: the venv comes first.
export PATH := $(abspath $(VENV))/bin:$(PATH)

# `make lab` settings. JUPYTER_TOKEN needs nothing here: a value from the environment or from the
# command line (`make lab JUPYTER_TOKEN=...`) reaches jupyter, which reads it itself; when it is
# unset or empty, Jupyter makes up a random token and prints the URL that contains it.
HOST ?= 127.0.0.1
PORT ?= 8888
# Jupyter refuses to start as root unless told to; root is the usual user in containers and CI.
LAB_ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--ServerApp.allow_root=True)

# Extra arguments for pytest, e.g. `make test PYTEST_ARGS='-m lesson01 -x'`.
PYTEST_ARGS ?=
# The suite runs this many test files at once (pytest-xdist; each file whole in one process, the
# longest first: tests/conftest.py): one per core, at most 4. TEST_JOBS=0 runs it in one process.
# (nproc counts the cores this process may use, but obeys OMP_NUM_THREADS: not here.)
TEST_JOBS ?= $(shell n=$$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1); \
	echo $$(( n < 4 ? n : 4 )))
TEST_PARALLEL = $(if $(filter-out 0,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder)

# Lessons are the folders of solutions/ (nbgrader source); `make release` writes lessons/.
LESSON_IDS = $(patsubst solutions/%/,%,$(wildcard solutions/*/))

.PHONY: help lab lab-instructor test lint format release bench hub sandbox clean distclean

help: ## List the targets
	@echo "Usage: make TARGET   (first use creates $(VENV)/ and installs the project into it)"
	@echo
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE) | \
		awk 'BEGIN {FS = ":.*## "}; {printf "  %-15s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || { \
		$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
			{ echo "error: $(PYTHON) must be Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2; exit 1; }; \
		echo "Creating $(VENV)/ with $(PYTHON) ..."; \
		$(PYTHON) -m venv $(VENV); \
	}
	@echo "Installing the project and its dependencies into $(VENV)/ (the first time takes a while) ..."
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	$(PY) -m pip uninstall --quiet --disable-pip-version-check --yes $(SLOW_IMPORTS)
	@touch $@

# nbgrader 0.9 ships its JupyterLab extensions prebuilt and pip enables its server extensions on
# install (see `jupyter labextension list`, `jupyter server extension list`). `make lab` is the
# learner's JupyterLab and `make lab-instructor` the instructor's; both put directories of this
# repository first on JUPYTER_CONFIG_PATH (searched before ~/.jupyter and the environment's
# configuration, which stay untouched):
#   deploy/jupyter/student  (learners only; the course's hub uses it for students too) turns off
#                           nbgrader's instructor extensions: Formgrader, Course List and Create
#                           Assignment, in the server and in the page. Validate and the
#                           Assignment List stay.
#   deploy/jupyter/no-news  turns off JupyterLab's announcements plugin, whose toast asks on first
#                           start whether to fetch official Jupyter news (it also checks for
#                           updates). Documented as `jupyter labextension disable <plugin>`.
# Jupyter starts in the repository root, so the formgrader finds nbgrader_config.py.
# attn-grade runs learner code in a bubblewrap sandbox (docs/grading.md). Install it where we can
# (root with apt-get, as in CI and containers); otherwise say what is missing and go on: the
# self-check then runs without a sandbox, the sandbox tests are skipped with the reason, and
# `attn-grade batch` refuses to grade a class until bubblewrap is there.
sandbox: ## Install bubblewrap, the grader's sandbox, if it is missing and we can
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing bubblewrap (attn-grade's sandbox) with apt-get ..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap \
			>/dev/null || echo "warning: could not install bubblewrap with apt-get" >&2; \
	else \
		echo "note: bubblewrap is not installed, so attn-grade cannot isolate submissions here." >&2; \
		echo "      Install it (Debian/Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf" >&2; \
		echo "      install bubblewrap); until then tests that need the sandbox are skipped." >&2; \
	fi

LEARNER_CONFIG := $(REPO_DIR)/deploy/jupyter/student:$(REPO_DIR)/deploy/jupyter/no-news
INSTRUCTOR_CONFIG := $(REPO_DIR)/deploy/jupyter/no-news
LAB_ARGS = --no-browser --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) \
	--ServerApp.root_dir=$(ROOT) $(LAB_ROOT_FLAG)

lab: $(STAMP) sandbox ## Serve the lessons in a learner's JupyterLab (PORT=8888, HOST=127.0.0.1, JUPYTER_TOKEN)
	cd $(ROOT) && JUPYTER_CONFIG_PATH="$(LEARNER_CONFIG)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		exec jupyter lab $(LAB_ARGS) --LabApp.default_url=/lab/tree/lessons

lab-instructor: $(STAMP) sandbox ## The same with nbgrader's instructor tools (Formgrader, Create Assignment)
	cd $(ROOT) && JUPYTER_CONFIG_PATH="$(INSTRUCTOR_CONFIG)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		exec jupyter lab $(LAB_ARGS) --LabApp.default_url=/lab/tree/solutions

lint: $(STAMP) ## Check style with ruff (no changes)
	ruff check .
	ruff format --check .

# Python reads a module's compiled form beside it (__pycache__/), but where PYTHONDONTWRITEBYTECODE
# is set, as on some CI hosts, it never writes one: every process of the suite (each grader,
# kernel and sandbox template) would compile the course's own modules again. Compiling them first
# (only what changed) took 2.3 % off the CPU of tests/test_grade_check.py on such a host.
test: lint sandbox ## Lint, then run the whole test suite (PYTEST_ARGS=... for pytest)
	$(PY) -m compileall -q attnlib autograder tests benchmarks >/dev/null
	pytest $(strip $(TEST_PARALLEL) $(PYTEST_ARGS))

format: $(STAMP) ## Reformat with ruff and apply ruff's safe fixes
	ruff format .
	ruff check --fix .

# nbgrader already clears the outputs of what it releases; the last step also clears them in the
# source notebooks, which are committed without outputs too (tests/test_release.py checks both).
release: $(STAMP) ## Regenerate lessons/ from solutions/ (nbgrader), clear notebook outputs
	@test -n "$(LESSON_IDS)" || { echo "error: no lesson folders in solutions/" >&2; exit 1; }
	@set -e; for lesson in $(LESSON_IDS); do \
		echo "nbgrader generate_assignment $$lesson --force"; \
		nbgrader generate_assignment "$$lesson" --force; \
	done
	jupyter nbconvert --log-level=WARN --clear-output --inplace solutions/*/*.ipynb lessons/*/*.ipynb

# Attention's speed and memory against the sequence length, grading throughput against nbgrader
# and the cost of isolation (benchmarks/README.md, benchmarks/grading.md), and each lesson's
# run time against its budget. Results are written to benchmarks/results/; run on a quiet machine.
# The class is graded three times every way: one run's speed-up moves with the host's speed.
bench: $(STAMP) sandbox ## Run the benchmarks; results in benchmarks/results/
	$(PY) -m benchmarks
	$(PY) -m benchmarks.grading --rounds 3
	$(PY) -m benchmarks.starved
	$(PY) -m benchmarks.writer
	$(PY) -m benchmarks.lessons
	$(PY) -m benchmarks.touched

# One instructor and three students log in with a shared password; deploy/demo.py installs the
# proxy (npm) on first use and explains the rest. docs/instructors.md covers a real class.
hub: $(STAMP) sandbox ## Start a local JupyterHub demo of the course on 127.0.0.1 (HUB_PORT=8000)
	cd $(ROOT) && exec $(PY) deploy/demo.py --port $${HUB_PORT:-8000}

clean: ## Remove caches and build leftovers (keeps .venv/ and gradebook.db)
	rm -rf .pytest_cache .ruff_cache .hypothesis build dist *.egg-info test-artifacts
	find . \( -path ./$(VENV) -o -path ./.git \) -prune -o \
		-type d \( -name __pycache__ -o -name .ipynb_checkpoints \) -prune -exec rm -rf {} +

distclean: clean ## clean, and remove .venv/ too
	rm -rf $(VENV)
