"""The project's plumbing: environment.yml agrees with pyproject.toml, CI runs `make test` and only
that, and the Makefile's targets do what the README promises."""

import os
import shutil
import stat
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
TORCH_PIN = SpecifierSet("==2.13.0")
MAKE = shutil.which("make")
needs_make = pytest.mark.skipif(MAKE is None, reason="GNU make is not installed")


def _pyproject():
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _environment():
    return yaml.safe_load((REPO / "environment.yml").read_text(encoding="utf-8"))


def _key(req: Requirement):
    """What must agree between the two files: name, extras, version constraint and marker."""
    return (sorted(req.extras), req.specifier, str(req.marker) if req.marker else None)


def _by_name(strings, where):
    reqs = {}
    for s in strings:
        req = Requirement(s)
        name = canonicalize_name(req.name)
        assert name not in reqs, f"{name} is listed twice in {where}"
        reqs[name] = req
    return reqs


def _pyproject_requirements():
    project = _pyproject()["project"]
    strings = list(project["dependencies"]) + list(project["optional-dependencies"]["dev"])
    return _by_name(strings, "pyproject.toml")


def _environment_pip_section():
    env = _environment()
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip_sections) == 1, "environment.yml needs exactly one `pip:` section"
    return [str(s).strip() for s in pip_sections[0]]


def _environment_requirements():
    # Lines starting with "-" are pip options such as "-e ."; everything else is a requirement.
    strings = [s for s in _environment_pip_section() if not s.startswith("-")]
    return _by_name(strings, "environment.yml (pip:)")


def test_environment_yml_lists_the_same_requirements_as_pyproject():
    in_pyproject = _pyproject_requirements()
    in_env = _environment_requirements()
    problems = []
    for name in sorted(in_pyproject.keys() - in_env.keys()):
        problems.append(f"{in_pyproject[name]} is in pyproject.toml but not in environment.yml")
    for name in sorted(in_env.keys() - in_pyproject.keys()):
        problems.append(f"{in_env[name]} is in environment.yml but not in pyproject.toml")
    for name in sorted(in_pyproject.keys() & in_env.keys()):
        if _key(in_pyproject[name]) != _key(in_env[name]):
            problems.append(
                f"{name}: pyproject.toml says {in_pyproject[name]}, "
                f"environment.yml says {in_env[name]}"
            )
    assert not problems, "\n".join(problems)


def test_environment_yml_installs_the_project_and_a_matching_python():
    env = _environment()
    assert env["name"] == "attention-course"
    assert env["channels"] == ["conda-forge"]
    assert "-e ." in _environment_pip_section(), "environment.yml must install the project (-e .)"

    conda_deps = [d for d in env["dependencies"] if isinstance(d, str)]
    pythons = [Requirement(d) for d in conda_deps if Requirement(d).name == "python"]
    assert len(pythons) == 1, f"environment.yml needs one python requirement, has {conda_deps}"
    requires_python = SpecifierSet(_pyproject()["project"]["requires-python"])
    assert pythons[0].specifier == requires_python, (
        f"environment.yml asks for {pythons[0]}, pyproject.toml's requires-python is "
        f"{requires_python}"
    )
    assert "pip" in conda_deps, "environment.yml must install pip for its pip: section"


def test_torch_is_pinned_to_the_cpu_wheel_version_everywhere():
    # Any other torch version pulls a multi-GB CUDA build on the course's machines.
    assert _pyproject_requirements()["torch"].specifier == TORCH_PIN
    assert _environment_requirements()["torch"].specifier == TORCH_PIN
    installed = Version(version("torch"))
    assert installed.base_version in TORCH_PIN, f"the environment has torch {installed}"


# --- CI entry point ------------------------------------------------------------------------------


def _fake_make(tmp_path, exit_code):
    """A `make` that records its working directory and arguments, then exits with exit_code."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "make-calls.txt"
    script = bindir / "make"
    script.write_text(f'#!/bin/sh\necho "$(pwd -P) $*" >> "{log}"\nexit {exit_code}\n')
    script.chmod(0o755)
    return bindir, log


@pytest.mark.parametrize("exit_code", [0, 3])
def test_ci_run_calls_make_test_once_from_the_repo_root(tmp_path, exit_code):
    ci_run = REPO / ".ci" / "run"
    assert ci_run.stat().st_mode & stat.S_IXUSR, ".ci/run must be executable"
    bindir, log = _fake_make(tmp_path, exit_code)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "CI": "true"}
    # Started from somewhere else, without stdin, as CI does.
    result = subprocess.run(
        [str(ci_run)], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True
    )
    assert result.returncode == exit_code, "`.ci/run` must exit with `make test`'s status"
    assert log.read_text().splitlines() == [f"{REPO} test"]


def test_ci_run_runs_nothing_but_make_test():
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    assert lines[0] in ("#!/usr/bin/env bash", "#!/bin/bash")
    commands = [ln.strip() for ln in lines[1:] if ln.strip() and not ln.strip().startswith("#")]
    assert commands[0] == "set -euo pipefail", commands
    assert commands[-1] == "make test", commands
    assert all(c.startswith("cd ") for c in commands[1:-1]), (
        f".ci/run may only change directory before `make test`, it runs {commands[1:-1]}"
    )


# --- Makefile ------------------------------------------------------------------------------------


def _make(*args, cwd=REPO, env=None, check=True):
    unset = ("PORT", "HOST", "MAKEFLAGS", "TEST_JOBS")
    base = {k: v for k, v in os.environ.items() if k not in unset}
    result = subprocess.run(
        [MAKE, "--no-print-directory", *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if check:
        assert result.returncode == 0, f"make {' '.join(args)} failed:\n{result.stderr}"
    return result


def _phony_targets():
    for line in (REPO / "Makefile").read_text().splitlines():
        if line.startswith(".PHONY:"):
            return line.split(":", 1)[1].split()
    raise AssertionError("the Makefile declares no .PHONY targets")


@needs_make
def test_make_help_lists_every_target_and_each_one_resolves():
    targets = _phony_targets()
    assert {"lab", "test", "lint", "format", "release", "bench", "clean", "help"} <= set(targets)
    listed = [ln.split()[0] for ln in _make("help").stdout.splitlines() if ln.startswith("  ")]
    assert sorted(listed) == sorted(targets)
    for target in targets:
        _make("-n", target)


@needs_make
def test_make_lab_serves_the_repo_root_and_opens_lessons():
    default = _make("-n", "lab").stdout
    assert f"cd {REPO} && JUPYTER_CONFIG_PATH=" in default
    assert "exec jupyter lab --no-browser" in default
    # A learner's lab: nbgrader's instructor extensions off (as for the hub's students), no news.
    config_path = default.split('JUPYTER_CONFIG_PATH="', 1)[1].split('"', 1)[0]
    assert config_path.startswith(f"{REPO}/deploy/jupyter/student:{REPO}/deploy/jupyter/no-news")
    for arg in (
        "--ServerApp.ip=127.0.0.1",
        "--ServerApp.port=8888",
        f"--ServerApp.root_dir={REPO}",
        "--LabApp.default_url=/lab/tree/lessons",
    ):
        assert arg in default, f"`make lab` should pass {arg}:\n{default}"

    custom = _make("-n", "lab", env={"PORT": "9123", "HOST": "0.0.0.0"}).stdout
    assert "--ServerApp.port=9123" in custom
    assert "--ServerApp.ip=0.0.0.0" in custom

    instructor = _make("-n", "lab-instructor").stdout
    assert "exec jupyter lab --no-browser" in instructor
    assert f"{REPO}/deploy/jupyter/no-news" in instructor and "jupyter/student" not in instructor
    assert "--LabApp.default_url=/lab/tree/solutions" in instructor


@needs_make
def test_make_test_lints_then_runs_pytest_with_passthrough_args():
    out = _make("-n", "test", "PYTEST_ARGS=-m lesson01 -x").stdout.splitlines()
    steps = [ln for ln in out if ln.startswith(("ruff ", "pytest")) or " -m compileall " in ln]
    jobs = min(len(os.sched_getaffinity(0)), 4)  # what nproc counts
    assert steps == [
        "ruff check .",
        "ruff format --check .",
        # the course's modules compiled once, not in every process (PYTHONDONTWRITEBYTECODE)
        ".venv/bin/python -m compileall -q attnlib autograder tests benchmarks >/dev/null",
        f"pytest -n {jobs} --dist loadfile --no-loadscope-reorder -m lesson01 -x",
    ]
    serial = _make("-n", "test", "TEST_JOBS=0", "PYTEST_ARGS=-x").stdout.splitlines()
    assert [ln for ln in serial if ln.startswith("pytest")] == ["pytest -x"]


def test_the_files_the_suite_starts_first_exist_once_each():
    """conftest's LONGEST_FIRST orders ``make test``'s files; a renamed file would silently lose
    its place and start last."""
    from conftest import LONGEST_FIRST

    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    missing = [name for name in LONGEST_FIRST if not (REPO / "tests" / name).is_file()]
    assert not missing, f"tests/conftest.py's LONGEST_FIRST names files not in tests/: {missing}"


def _scratch_project(tmp_path, *, installed):
    """A copy of the Makefile next to a pyproject.toml, with or without a finished install."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    os.utime(tmp_path / "pyproject.toml", (1_000_000, 1_000_000))
    if installed:
        (tmp_path / ".venv" / "bin").mkdir(parents=True)
        (tmp_path / ".venv" / "bin" / "python").symlink_to(sys.executable)
        (tmp_path / ".venv" / ".installed").touch()
        os.utime(tmp_path / ".venv" / ".installed", (2_000_000, 2_000_000))
    return tmp_path


@needs_make
def test_make_creates_the_venv_and_reinstalls_when_pyproject_changes(tmp_path):
    install = "-m pip install --quiet --disable-pip-version-check -e '.[dev]'"

    fresh = _make("-n", "test", cwd=_scratch_project(tmp_path / "fresh", installed=False)).stdout
    assert "-m venv .venv" in fresh and install in fresh
    removed = f"-m pip uninstall --quiet --disable-pip-version-check --yes {' '.join(SLOW_IMPORTS)}"
    assert fresh.index(install) < fresh.index(removed), fresh  # after every install

    project = _scratch_project(tmp_path / "installed", installed=True)
    assert install not in _make("-n", "test", cwd=project).stdout

    os.utime(project / "pyproject.toml", (3_000_000, 3_000_000))  # newer than the stamp
    assert install in _make("-n", "test", cwd=project).stdout


def slow_imports() -> list[str]:
    """The packages the Makefile removes after installing (its SLOW_IMPORTS)."""
    for line in (REPO / "Makefile").read_text(encoding="utf-8").splitlines():
        if line.startswith("SLOW_IMPORTS :="):
            return line.split(":=", 1)[1].split()
    raise AssertionError("the Makefile sets no SLOW_IMPORTS")


SLOW_IMPORTS = slow_imports()


@pytest.mark.skipif(
    Path(sys.prefix).resolve() != (REPO / ".venv").resolve(),
    reason="runs in the environment `make` installs (.venv/)",
)
def test_a_jupyter_program_here_compiles_no_iri_grammars():
    """jsonschema, which every Jupyter server and nbgrader command imports, finds no
    rfc3987-syntax to import (2-3 s of CPU at each start): the Makefile removed it."""
    assert SLOW_IMPORTS == ["rfc3987-syntax"]
    done = subprocess.run(
        [sys.executable, "-c", "import sys, nbformat; print(sorted(sys.modules))"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "jsonschema" in done.stdout and "rfc3987_syntax" not in done.stdout


@needs_make
def test_make_bench_measures_attention_and_grading(tmp_path):
    project = _scratch_project(tmp_path, installed=True)
    planned = _make("-n", "bench", cwd=project).stdout
    assert "-m benchmarks\n" in planned and "-m benchmarks.grading" in planned
    assert "-m benchmarks.lessons" in planned and "-m benchmarks.touched" in planned
