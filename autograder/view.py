"""What a sandbox sees: a read-only view of exactly what learner code needs, built by bubblewrap.

The view holds

* the system's ``/usr`` (and the ``/lib``, ``/bin`` links), the dynamic loader's cache;
* the Python environment — the base interpreter and the virtual environment, and the links the
  interpreter is reached through — with any installed copy of ``attnlib`` or ``autograder``
  hidden under an empty directory;
* the lesson's *edition* of the course (:func:`edition`) at ``/opt/attn-course``, first on
  ``PYTHONPATH``: attnlib's implementations of earlier lessons only, the grader's clients in
  place of the checks, the hidden tests and the quiz answer keys, and the sandbox's own code;
* a private ``/tmp`` and ``/dev``; nothing of the course (source notebooks, gradebook, other
  submissions), nothing of the grader's home, no network.

Its environment is an allow-list (:func:`environment`): nothing of the grader's (a hub's API token,
say) reaches learner code. :func:`command` assembles the bubblewrap command line that starts the
template in this view; as root, bubblewrap runs privileged and ``setpriv`` drops to the claimed
sandbox user with no capabilities and ``no_new_privs``; as anyone else, bubblewrap makes a user
namespace.
"""

from __future__ import annotations

import ast
import functools
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import attnlib
import autograder
from attnlib import checks

MOUNT = "/opt/attn-course"
SYSTEM_TOPS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # in the view as on the host
HELPERS = {"_validate", "devices"}  # implementation modules that teach nothing graded
REAL = {  # attnlib files the sandbox gets as they are (relative to the attnlib package)
    "__init__.py",
    "_adapters.py",
    "_shapes.py",
    "mastery.py",
    "quiz/learner.py",
    "quiz/sheet06.py",
    "measure.py",
    "checks/silence.py",
    "data/__init__.py",
    "data/course.txt",
    "viz/figures.py",
    "viz/training.py",
}
DEMOS = {  # lesson → attnlib modules its demonstrations need (with what they import)
    "03-self-cross": ("torch/positional.py", "torch/projections.py"),  # the reversing model
    "04-multi-head": ("torch/modules.py",),  # MultiHeadAttention.from_torch
    "06-build-and-train": ("torch/gpt.py", "torch/train.py"),  # the character model
}
SANDBOX = ("__init__.py", "protocol.py", "sandbox/__init__.py", "sandbox/confine.py",
           "sandbox/executor.py", "sandbox/syscalls.py", "sandbox/template.py",
           "sandbox/verdicts.py")  # fmt: skip
CLIENTS = {  # edition file → where it stands in the view
    "checks.py": "attnlib/checks/__init__.py",
    "quiz.py": "attnlib/quiz/__init__.py",
    "viz.py": "attnlib/viz/__init__.py",
    "backend.py": ("attnlib/numpy/__init__.py", "attnlib/torch/__init__.py"),
    "hidden.py": "autograder/hidden.py",
    "lesson.py": "attnlib/lesson.py",
}


# ---------------------------------------------------------------------------------------------
# the edition


def _defined(path: Path) -> set[str]:
    """The functions and classes a module file defines at its top level (read, not imported:
    the grader never loads PyTorch to lay out a view)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}


def lesson_index(lesson: str) -> int:
    """Where ``lesson`` stands in the course (a lesson without checks comes after all)."""
    order = list(checks.LESSONS)
    return order.index(lesson) if lesson in order else len(order)


@functools.cache
def module_lessons(backend: str) -> dict[str, int | None]:
    """For each implementation module of ``attnlib.<backend>``: the lesson it teaches.

    A module's lesson is the latest lesson of the contract exercises it defines or imports from
    its siblings; ``None`` marks a helper (:data:`HELPERS`). A module that defines no exercise
    and is not a known helper counts as teaching the last lesson, so a new module is hidden
    until someone decides otherwise.
    """
    package = Path(attnlib.__file__).parent / backend
    names = sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__")
    own: dict[str, int] = {}
    deps: dict[str, set[str]] = {}
    for name in names:
        tops = _defined(package / f"{name}.py")
        defined = [checks.EXERCISES[e].lesson for e in checks.EXERCISES if e in tops]
        if defined:
            own[name] = max(lesson_index(lesson) for lesson in defined)
        deps[name] = _sibling_imports(package / f"{name}.py", set(names))
    last = len(checks.LESSONS) - 1

    def lesson_of(name: str, seen: frozenset = frozenset()) -> int | None:
        if name in seen:
            return own.get(name)
        found = [own[name]] if name in own else []
        for dep in deps[name]:
            value = lesson_of(dep, seen | {name})
            if value is not None:
                found.append(value)
        if found:
            return max(found)
        return None if name in HELPERS else last

    return {name: lesson_of(name) for name in names}


def _sibling_imports(path: Path, siblings: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(a.name for a in node.names)
    return found & siblings


def has_demos(lesson: str) -> bool:
    """Whether ``lesson``'s demonstrations need modules that implement its own exercises."""
    return bool(DEMOS.get(lesson))


def demo_files(lesson: str) -> dict[str, Path]:
    """The modules of :data:`DEMOS` for ``lesson`` and every sibling module they import.

    A lesson that trains a model in its demonstrations needs the course's implementations of its
    own exercises (lesson 06's GPT is built from its ``CausalSelfAttention``): they go into the
    *demonstrations'* edition only, whose sandbox shows the notebook's figures; the verdicts
    are decided in a sandbox of the plain edition, where they are absent
    (:func:`autograder.engine.grade`).
    """
    course = Path(attnlib.__file__).parent
    files: dict[str, Path] = {}
    todo = list(DEMOS.get(lesson, ()))
    while todo:
        rel = todo.pop()
        if f"attnlib/{rel}" in files:
            continue
        path = course / rel
        files[f"attnlib/{rel}"] = path
        siblings = {p.stem for p in path.parent.glob("*.py") if p.stem != "__init__"}
        folder = Path(rel).parent
        todo += [str(folder / f"{name}.py") for name in _sibling_imports(path, siblings)]
    return files


def edition(lesson: str, demos: bool = False) -> dict[str, Path]:
    """The files of ``lesson``'s edition: path in the view (under :data:`MOUNT`) → source.

    With ``demos``, the edition that shows the lesson's demonstrations (:func:`demo_files`).
    """
    course = Path(attnlib.__file__).parent
    grader = Path(autograder.__file__).parent
    clients = grader / "sandbox" / "edition"
    files: dict[str, Path] = {f"attnlib/{rel}": course / rel for rel in REAL}
    files.update({f"autograder/{rel}": grader / rel for rel in SANDBOX})
    for source, targets in CLIENTS.items():
        for target in (targets,) if isinstance(targets, str) else targets:
            files[target] = clients / source
    graded = lesson_index(lesson)
    for backend in ("numpy", "torch"):
        for name, taught in module_lessons(backend).items():
            if taught is None or taught < graded:
                files[f"attnlib/{backend}/{name}.py"] = course / backend / f"{name}.py"
    if demos:
        files.update(demo_files(lesson))
    return files


def materialize(lesson: str, dest: Path, demos: bool = False) -> Path:
    """The edition as a folder of links under ``dest`` (for a template without a view).

    Without bubblewrap nothing hides the real attnlib from learner code that looks for it by
    path; this only makes the default imports resolve to the edition, so the notebook shows the
    same verdicts as in a sandbox.
    """
    for rel, src in edition(lesson, demos).items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(src)
    return dest


# ---------------------------------------------------------------------------------------------
# bubblewrap


def bwrap() -> str | None:
    return shutil.which("bwrap")


@functools.cache
def probe() -> str | None:
    """None when bubblewrap can make this sandbox here, else why not (one sentence)."""
    path = bwrap()
    if path is None:
        return (
            "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap; "
            "Fedora: dnf install bubblewrap)"
        )
    args = [path, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev"]
    if os.geteuid() != 0:
        args.insert(1, "--unshare-user")
    try:
        done = subprocess.run(
            [*args, "--", "true"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap could not run: {error}"
    if done.returncode != 0:
        return (
            "bubblewrap cannot create namespaces here "
            f"({done.stderr.strip()[:200] or done.returncode}); unprivileged user namespaces "
            "may be disabled (sysctl kernel.unprivileged_userns_clone, or AppArmor's "
            "kernel.apparmor_restrict_unprivileged_userns)"
        )
    return None


def environment(lesson: str) -> dict[str, str]:
    """The sandbox's whole environment: an allow-list, nothing inherited. ``NBGRADER_EXECUTION``
    is set as nbgrader sets it when grading, for the self-check too: a lesson that trains a model
    trains it briefly, as in the graded run whose verdict the check foretells."""
    return {
        "PATH": f"{os.path.realpath(sys.prefix)}/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONPATH": MOUNT,
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "MPLCONFIGDIR": "/tmp/matplotlib",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "ATTN_LESSON": lesson,
        "NBGRADER_EXECUTION": "autograde",
    }


def python_dirs() -> list[str]:
    """The Python environment the template runs in: base interpreter, venv, site-packages."""
    dirs = []
    for path in (sys.base_prefix, sys.prefix, *site.getsitepackages()):
        path = os.path.realpath(path)
        if path.startswith("/usr/") or path == "/usr":
            continue
        if not any(path == d or path.startswith(d + os.sep) for d in dirs):
            dirs.append(path)
    return dirs


def python_links() -> list[tuple[str, str]]:
    """The symbolic links the interpreter is reached through that the view would not otherwise
    hold, each as its path and its target as written: a venv made by an interpreter started
    through a link names that link (uv's ``~/.local/bin/python3.11``, which leads through its
    folder link ``cpython-3.11-…`` to the installed patch release; a ``3.11`` link beside
    pyenv's versions), and Python finds its installation through it. The view makes the same
    links (:func:`command`), which lead to the real paths it binds, so nothing is visible
    through them that is not already."""
    dirs = python_dirs()
    found: dict[str, str] = {}
    for start in (interpreter(), getattr(sys, "_base_executable", sys.executable)):
        for path, target in links_met(start):
            if not _visible(path, dirs):
                found.setdefault(path, target)
    return list(found.items())


def links_met(path: str) -> list[tuple[str, str]]:
    """Every symbolic link met while ``path`` is resolved, in order, as ``os.path.realpath``
    resolves it: each link's path (its folder already resolved) and its target as written."""
    met: list[tuple[str, str]] = []
    where, todo = "/", list(reversed(Path(os.path.abspath(path)).parts[1:]))
    while todo and len(met) < 40:  # (a loop of links ends here, as the kernel's does)
        name = todo.pop()
        if name == "..":
            where = os.path.dirname(where)
            continue
        step = os.path.join(where, name)
        if not os.path.islink(step):
            where = step
            continue
        target = os.readlink(step)
        met.append((step, target))
        if os.path.isabs(target):
            where = "/"
        todo += reversed([part for part in Path(target).parts if part not in ("/", ".")])
    return met


def _visible(path: str, dirs: list[str]) -> bool:
    """Whether the view holds ``path`` already: in ``/usr``, a system folder or one of ``dirs``."""
    tops = ("/usr", *SYSTEM_TOPS, *dirs)
    return any(path == top or path.startswith(top + os.sep) for top in tops)


def under_tmp() -> list[str]:
    """The folders and links of the view that lie under ``/tmp``, which each sandbox mounts
    afresh (:func:`autograder.sandbox.confine.make_root` makes them again there)."""
    paths = [*python_dirs(), *(path for path, _ in python_links())]
    return [path for path in paths if path.startswith("/tmp/")]


def hidden_installs() -> list[str]:
    """Installed copies of the course's packages in site-packages: hidden in the view."""
    out = []
    for sitedir in site.getsitepackages():
        for name in ("attnlib", "autograder"):
            path = os.path.join(os.path.realpath(sitedir), name)
            if os.path.isdir(path):
                out.append(path)
    return out


def command(
    lesson: str,
    control_fd: int,
    uid: int | None,
    tmp_mb: int = 256,
    demos: bool = False,
    sets_uids: bool = False,
) -> list[str]:
    """The bubblewrap command that starts the template for ``lesson`` in its view; as ``uid``
    (when the grader runs as root) with no capability, or, with ``sets_uids``, with only
    ``CAP_SETUID`` and ``CAP_SETGID``: a template several graders share starts each sandbox as
    the user id its own grader claimed (:func:`autograder.sandbox.confine.become`)."""
    args = [
        bwrap() or "bwrap",
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--clearenv",
    ]
    if uid is None:
        args.append("--unshare-user")
    args += ["--ro-bind", "/usr", "/usr"]
    for top in SYSTEM_TOPS:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for path in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime"):
        args += ["--ro-bind-try", path, path]
    # The template's /proc is the host's, so each sandbox can mount a fresh one of its own
    # over it (the kernel allows that only where a full /proc is already visible); learner code
    # never sees this one.
    args += ["--bind", "/proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "1777", "--size", str(tmp_mb * 2**20), "--tmpfs", "/tmp"]
    binds = [("--ro-bind", d, d) for d in python_dirs()]
    binds += [("--ro-bind", str(src), f"{MOUNT}/{rel}")
              for rel, src in sorted(edition(lesson, demos).items())]  # fmt: skip
    binds += [("--symlink", target, path) for path, target in python_links()]
    made: set[str] = {"/", "/usr", "/tmp", "/proc", "/dev"}
    for how, src, dest in binds:
        for parent in _parents(dest):  # (bubblewrap would make them 0700: closed to the user)
            if parent not in made:
                args += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        args += [how, src, dest]
        made.add(dest)
    for path in hidden_installs():
        args += ["--tmpfs", path, "--remount-ro", path]
    for key, value in environment(lesson).items():
        args += ["--setenv", key, value]
    args += ["--chdir", "/tmp", "--"]
    if uid is not None:
        caps = "-all,+setuid,+setgid" if sets_uids else "-all"
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        args += [f"--inh-caps={caps}", f"--bounding-set={caps}", "--no-new-privs"]
        if sets_uids:  # kept across the exec by a user other than root: ambient
            args.append(f"--ambient-caps={caps}")
    return [*args, *template_argv(control_fd, isolate=True)]


def template_argv(control_fd: int, isolate: bool) -> list[str]:
    return [interpreter(), "-m", "autograder.sandbox.template", str(control_fd), str(int(isolate))]


def interpreter() -> str:
    """``sys.executable`` in its folder's real path, the one the view binds (:func:`python_dirs`):
    a grader started through a link (a home or course folder reached by a symlink) names a path
    the sandbox does not have. The name itself is kept: a venv's ``python`` is a link to the base
    interpreter, and Python finds its venv beside the name it was started by."""
    folder, name = os.path.split(sys.executable)
    return os.path.join(os.path.realpath(folder), name)


def _parents(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]
