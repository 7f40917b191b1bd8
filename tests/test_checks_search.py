"""The property-based search behind every check: valid problems, real bugs, smallest example."""

import re
import sys

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


def test_a_small_problem_the_search_finds_is_shown_with_its_values():
    import ast

    from attnlib.numpy import cosine_scores

    def clipped(Q, K, eps=1e-8):  # right, but never quite ±1: only the search meets a ±1
        return np.clip(cosine_scores(Q, K, eps), -0.999, 0.999)

    outcome = checks.check("cosine_scores", clipped)
    assert not outcome.passed
    found = re.search(r" on Q (\[\[.*?\]\]), K (\[\[.*?\]\])", outcome.message)
    assert found, outcome.feedback()
    Q, K = (np.array(ast.literal_eval(text)) for text in found.groups())
    assert Q.size <= 4 and K.size <= 4  # the values of a small problem, not its shape
    assert not np.allclose(clipped(Q, K), cosine_scores(Q, K)), "they are the failing problem"
    assert history_key(outcome.message) == history_key(
        outcome.message.replace(found.group(0), " on Q (5, 4), K (7, 4)")
    )


def history_key(message):
    from autograder.history import mistake_key

    return mistake_key(message)


def test_the_search_is_the_same_every_run():
    def off_when_d_is_one(Q, K):
        S = Q @ np.swapaxes(K, -1, -2)
        return S * 1.5 if Q.shape[-1] == 1 else S

    first = checks.check("dot_scores", off_when_d_is_one)
    second = checks.check("dot_scores", off_when_d_is_one)
    assert not first.passed and first == second
    # the shrunk example has d_k = 1: every row of K holds one number
    assert re.search(r" K \[(\[[^,\[\]]+\](, )?)+\]", first.message), first.message


def _drawn_afresh(name: str, secret=None) -> list[str]:
    """Every problem hypothesis draws for exercise ``name`` (with a grading's ``secret``: that
    grading's own) when none fails, drawn now."""
    from attnlib.checks._core import _find

    met = []

    def record(probe) -> bool:
        with np.printoptions(threshold=sys.maxsize):
            met.append(repr(probe))
        return False

    assert _find(name, record, secret) is None
    return met


@pytest.mark.parametrize("name", sorted(search.STRATEGIES))
def test_a_right_answer_meets_exactly_the_problems_hypothesis_draws(name):
    """The search runs a right answer on problems drawn once per process (``drawn``) instead
    of through hypothesis each time: they must be hypothesis' own, in its order; a grading's
    secret problems too."""
    from attnlib.checks._core import drawn

    secret = checks.Secret(seed=20261201, count=6)
    with np.printoptions(threshold=sys.maxsize):
        cached = [repr(probe) for probe in drawn(name)]
        hidden = [repr(probe) for probe in drawn(name, secret)]
    assert cached == _drawn_afresh(name) and len(cached) > 1
    assert hidden == _drawn_afresh(name, secret) and len(hidden) == secret.count


def _table_of(name: str, fn):
    """``fn`` as a learner's kernel sees it through a spy, and a function that only looks its
    arguments up in what the spy recorded (the public problems: fixed probes and search)."""
    table = {}

    def key(args, kwargs):
        return repr((args, sorted(kwargs.items())))

    def spy(*args, **kwargs):
        with np.printoptions(threshold=sys.maxsize):
            table[key(args, kwargs)] = out = fn(*args, **kwargs)
        return out

    assert checks.check(name, spy)

    def lookup(*args, **kwargs):
        with np.printoptions(threshold=sys.maxsize):
            found = table.get(key(args, kwargs))
        return np.zeros(np.shape(fn(*args, **kwargs))) if found is None else found

    return lookup


def test_secret_problems_fail_a_table_of_the_public_ones_and_no_right_answer():
    from attnlib.checks._core import SECRET_NOTE
    from attnlib.numpy import softmax

    lookup = _table_of("softmax", softmax)
    assert checks.judge("softmax", lookup)  # every public problem is in the table
    seeds = [checks.Secret(seed) for seed in (1, 2)]
    verdicts = [checks.judge("softmax", lookup, secret=s) for s in seeds]
    for verdict in verdicts:
        assert not verdict and verdict.message.endswith(SECRET_NOTE), verdict
    assert checks.judge("softmax", lookup, secret=seeds[0]) == verdicts[0]  # same seed, same words
    assert _drawn_afresh("softmax", seeds[0]) != _drawn_afresh("softmax", seeds[1])
    for right in (softmax, lambda x, axis=-1: softmax(np.asarray(x, dtype=np.float64), axis)):
        assert checks.judge("softmax", right, secret=seeds[0]), "a right answer passes"
    wrong = checks.judge("softmax", lambda x, axis=-1: softmax(x, 0), secret=seeds[0])
    assert not wrong and SECRET_NOTE not in wrong.message  # found on the public problems first


@pytest.mark.parametrize("lesson", sorted(checks.LESSONS))
def test_problems_drawn_ahead_are_the_lessons_searches_own(lesson):
    """A grader draws a lesson's problems while its template warms (``checks.draw_ahead``):
    afterwards every search of the lesson finds its problems drawn, and no other lesson's."""
    from attnlib.checks._core import drawn

    drawn.cache_clear()
    checks.draw_ahead(lesson)
    ahead = drawn.cache_info().currsize
    searched = [e.name for e in checks.LESSONS[lesson] if e.name in search.STRATEGIES]
    assert ahead == len(searched) > 0
    for name in searched:
        drawn(name)
    assert drawn.cache_info().currsize == ahead  # found drawn: nothing drawn again
    checks.draw_ahead("no-such-lesson")  # a lesson without checks has nothing to draw
    assert drawn.cache_info().currsize == ahead


def test_the_search_meets_the_same_problems_whatever_local_code_is_loaded(tmp_path, monkeypatch):
    """hypothesis mixes integers written in "local" modules (anything outside site-packages:
    the course's editable install, a learner's own helper file) into what it draws. The
    learner's kernel and the grader load different ones, so the problems, and the smallest
    failing example a verdict names, would differ between them: the search leaves them out,
    and writes no cache of them into the learner's folder."""
    monkeypatch.chdir(tmp_path)
    before = _drawn_afresh("attention")
    helper = tmp_path / "my_helpers_4f1c.py"
    helper.write_text("SIZES = [" + ", ".join(str(3 + 7 * i) for i in range(400)) + "]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("my_helpers_4f1c")
    try:
        after = _drawn_afresh("attention")
    finally:
        monkeypatch.delitem(sys.modules, "my_helpers_4f1c")
    assert len(before) > 10 and after == before
    assert not (tmp_path / ".hypothesis").exists()


def test_a_function_that_runs_a_check_itself_is_judged_and_nothing_hangs():
    """A learner's function may call the checks (a test of their own inside it): a search, and
    its shrinking, inside another one's must not wait for it."""
    import threading

    def up_to_8(T):  # passes the fixed probes; the search finds T = 9
        return np.tril(np.ones((8, 8), dtype=bool))[:T, :T]

    def checking(T):
        checks.check("causal_mask", up_to_8)
        return up_to_8(T)

    found = []
    worker = threading.Thread(
        target=lambda: found.append(checks.check("causal_mask", checking)), daemon=True
    )
    worker.start()
    worker.join(timeout=120)
    assert found, "the check did not finish"
    assert not found[0].passed and "T=9" in found[0].message


@pytest.mark.parametrize("name", sorted(search.STRATEGIES))
def test_secret_problems_change_no_verdict_of_a_right_answer_or_a_named_mistake(name):
    """What secret problems cost in one verdict, on what the checks know: the reference passes
    them whatever the seed, and each named mistake (what its buggy code returns) is judged word
    for word as without them."""
    exercise = checks.EXERCISES[name]
    answers = [exercise.reference, *(mistake.returns for mistake in exercise.mistakes)]
    for answer in answers:
        public = checks.judge(name, answer)
        for seed in (11, 22):
            assert checks.judge(name, answer, secret=checks.Secret(seed)) == public, answer
    assert checks.judge(name, exercise.reference)
