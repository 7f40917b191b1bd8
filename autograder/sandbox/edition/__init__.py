"""The grader's edition of attnlib: what learner code may import while a lesson is graded.

:mod:`autograder.view` binds these files over attnlib's own in the sandbox's read-only view:

* ``checks.py`` → ``attnlib/checks/__init__.py``: ``report``, ``check`` and ``assert_correct``
  print or raise the verdict the grader reached outside the sandbox; there are no checks, probes
  or reference implementations inside;
* ``hidden.py`` → ``autograder/hidden.py``: the hidden test cells' ``check`` and ``answer``, the
  same way;
* ``quiz.py`` → ``attnlib/quiz/__init__.py``: no answer keys; mastery questions are graded
  from outside;
* ``lesson.py`` → ``attnlib/lesson.py``: the first cell's mastery line, without the course's
  functions standing in for the learner's;
* ``viz.py`` → ``attnlib/viz/__init__.py``: explorers show a placeholder (they are for
  JupyterLab); the static figures are attnlib's own;
* ``backend.py`` → ``attnlib/numpy/__init__.py`` and ``attnlib/torch/__init__.py``: exports
  whatever implementation modules the view holds — only those of lessons before the one graded.

This package itself is never imported on the trusted side except by the tests.
"""
