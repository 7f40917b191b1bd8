"""The untrusted side of grading: the code that runs inside the sandbox.

Nothing here is trusted by the grader. :mod:`.template` is the warm process that forks one clean
sandbox per submission, :mod:`.confine` gives that sandbox its own namespaces and limits, and
:mod:`.executor` runs the learner's cells and answers the trusted side's requests with plain data
(:mod:`autograder.protocol`). The grader binds exactly these files, and the lesson's edition of
attnlib (:mod:`.edition`), into the sandbox's read-only view.
"""
