"""Validate a notebook the way nbgrader's Validate button does, and keep the notebook it ran.

The button posts to nbgrader's ``validate_assignment`` server extension, whose handler loads
nbgrader's config from the server's directory and calls ``Validator(config=...).validate(path)``
in the server's process. This script does the same in a process of its own, started in the
course directory, and also writes the notebook the Validator executed (Run All in a Jupyter
kernel, with ``NBGRADER_EXECUTION=validate``), so a test can read that one run's cells instead of
running the notebook a second time::

    python validate_as_the_button.py NOTEBOOK EXECUTED   # prints the handler's reply as JSON

The reply is the handler's: ``{"success": true, "value": RESULTS}``, or, when the Validator
raised, ``{"success": false, "value": TRACEBACK}``, which the button shows under "There was an
error running the validate command:".
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import nbformat
from jupyter_core.paths import jupyter_config_path
from nbgrader.apps import NbGrader
from nbgrader.validator import Validator


class KeepingValidator(Validator):
    """nbgrader's Validator, which also keeps the notebook it executed."""

    executed: nbformat.NotebookNode | None = None

    def _preprocess(self, nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
        self.executed = super()._preprocess(nb)
        return self.executed


def button_config():
    """nbgrader's config as the button's handler loads it (``ValidateAssignmentHandler``)."""
    paths = jupyter_config_path()
    paths.insert(0, os.getcwd())
    app = NbGrader()
    app.config_file_paths.append(paths)
    app.load_config_file()
    return app.config


def main(notebook: str, executed: str) -> None:
    validator = KeepingValidator(config=button_config())
    try:
        results = validator.validate(os.path.abspath(notebook))
    except Exception:  # noqa: BLE001 — as the handler: the reply carries the traceback
        json.dump({"success": False, "value": traceback.format_exc()}, sys.stdout)
        return
    if validator.executed is None:  # nbgrader runs no notebook whose cells changed type
        raise SystemExit(f"the Validator did not run {notebook}: {results}")
    nbformat.write(validator.executed, executed)
    json.dump({"success": True, "value": results}, sys.stdout)


if __name__ == "__main__":
    main(*sys.argv[1:])
