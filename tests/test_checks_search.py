"""The property-based search behind every check: valid problems, real bugs, smallest example."""

import numpy as np
import pytest
from hypothesis import given, settings

import attnlib.checks as checks
from attnlib.checks import search


@pytest.mark.parametrize("name", sorted(search.STRATEGIES))
def test_every_drawn_problem_is_one_the_reference_accepts(name):
    exercise = checks.EXERCISES[name]

    @settings(max_examples=60, deadline=None, derandomize=True, database=None)
    @given(probe=search.STRATEGIES[name]())
    def reference_accepts(probe):
        exercise.reference(*probe.args, **probe.kwargs)

    reference_accepts()


# Lesson 06's exercises that are no function of arrays have nothing to search: two module
# classes, compared with the course's module on fixed weights, and a property test, judged by the
# planted bugs it catches. Their checks are all ``extra``; they have no fixed probes either.
NOT_SEARCHED = {"CausalSelfAttention", "RepairedBlock", "check_attention"}


def test_every_exercise_has_a_search():
    assert search.NOT_SEARCHED == NOT_SEARCHED
    assert set(search.STRATEGIES) == set(checks.EXERCISES) - NOT_SEARCHED
    for name in NOT_SEARCHED:
        exercise = checks.EXERCISES[name]
        assert exercise.extra and not list(exercise.probes()), name


def test_a_bug_the_fixed_probes_miss_is_found_and_shrunk():
    def causal_mask_up_to_8(T):  # passes T = 1, 4, 7; wrong past 8
        return np.tril(np.ones((8, 8), dtype=bool))[:T, :T]

    outcome = checks.check("causal_mask", causal_mask_up_to_8)
    assert not outcome.passed
    assert "T=9" in outcome.message  # the smallest T that fails


def test_the_search_is_the_same_every_run():
    def off_when_d_is_one(Q, K):
        S = Q @ np.swapaxes(K, -1, -2)
        return S * 1.5 if Q.shape[-1] == 1 else S

    first = checks.check("dot_scores", off_when_d_is_one)
    second = checks.check("dot_scores", off_when_d_is_one)
    assert not first.passed and first == second
    assert ", 1)" in first.message  # the shrunk example has d_k = 1
