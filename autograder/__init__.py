"""autograder — hidden invariant tests and grading for the attention course.

Hidden test cells in the lesson notebooks call :func:`autograder.hidden.check`,
so nbgrader, pytest and the course's own grader run the same checks.
"""
