"""The numbers of lesson 06's mastery questions, for each learner: no answers here.

:func:`numbers` draws a learner's numbers (:func:`attnlib.quiz.learner.learner_rng`) and
:func:`sheet` writes the questions with them. The notebook prints them, in a learner's kernel
and in the grader's sandbox alike; :mod:`attnlib.quiz.lesson06` judges the answers.
"""

from __future__ import annotations

from .learner import learner_id, learner_rng

LESSON = "06-build-and-train"


def numbers(learner: str | None = None) -> dict[str, dict]:
    """The learner's numbers for every question (default learner: :func:`learner_id`)."""
    rng = learner_rng(LESSON, learner)
    out: dict[str, dict] = {}
    out["q1"] = {
        "layers": int(rng.choice([12, 24, 32, 48])),
        "heads": int(rng.choice([8, 12, 16, 32])),
        "d_head": int(rng.choice([64, 128])),
        "context": int(rng.choice([1024, 2048, 4096, 8192])),
        "batch": int(rng.choice([1, 2, 4, 8])),
        "dtype": str(rng.choice(["float16", "float32"])),
    }
    x = (rng.integers(-4, 5, size=3) / 2).tolist()  # logits in steps of 0.5
    while True:  # an upstream gradient that is not constant (a constant one gives zero)
        g = rng.integers(-3, 4, size=3).tolist()
        if len(set(g)) > 1:
            break
    out["q2"] = {"x": x, "grad_y": g}
    period = int(rng.integers(5, 21))
    out["q3"] = {"period": period, "query": int(rng.integers(period + 1, 2 * period))}
    while True:  # two allowed keys whose scores differ clearly; the masked key would win
        q = rng.integers(-2, 3, size=4)
        K = rng.integers(-2, 3, size=(3, 4))
        masked = int(rng.integers(0, 3))
        allowed = [j for j in range(3) if j != masked]
        s = K @ q / 2.0  # (3,) scaled scores, sqrt(d_k) = 2
        if abs(s[allowed[0]] - s[allowed[1]]) >= 1 and s[masked] >= s[allowed].max() + 0.5:
            break
    out["q4"] = {"q": q.tolist(), "K": K.tolist(), "masked": masked}
    d_model = int(rng.choice([48, 96, 192, 384, 768]))
    heads = [h for h in (2, 3, 4, 6, 8, 12) if d_model % h == 0]
    out["q5"] = {"d_model": d_model, "n_heads": int(rng.choice(heads))}
    out["q6"] = {
        "n": int(rng.choice([512, 1024, 2048, 4096])),
        "heads": int(rng.choice([4, 8, 12, 16])),
        "d_head": int(rng.choice([32, 64, 128])),
    }
    return out


def _q1_prompt() -> str:
    p = numbers()["q1"]
    return (
        f"A decoder has {p['layers']} layers of {p['heads']} heads with d_head = {p['d_head']}. "
        f"How many bytes does its KV cache take for a batch of {p['batch']} sequences of "
        f'{p["context"]} tokens in {p["dtype"]}? (A number of bytes, or e.g. "3 GiB".)'
    )


def _q2_prompt() -> str:
    p = numbers()["q2"]
    return (
        f"y = softmax(x) for x = {p['x']}. The loss has gradient {p['grad_y']} with respect "
        "to y. What is its gradient with respect to x? (Three numbers, to 3 decimals.)"
    )


def _q3_prompt() -> str:
    p = numbers()["q3"]
    return (
        f"A sequence of random tokens repeats with period {p['period']} (token i equals token "
        f"i - {p['period']} from position {p['period']} on; positions count from 0). Which key "
        f"does an induction head attend to from query {p['query']}, and which key does a "
        "previous-token head attend to? (A pair: (induction, previous).)"
    )


def _q4_prompt() -> str:
    p = numbers()["q4"]
    return (
        f"Review of lessons 01-02. A query q = {p['q']} attends to keys k0 = {p['K'][0]}, "
        f"k1 = {p['K'][1]}, k2 = {p['K'][2]} with scaled dot-product attention; key "
        f"{p['masked']} is masked. What are the three attention weights? (Three numbers.)"
    )


def _q5_prompt() -> str:
    p = numbers()["q5"]
    return (
        f"Review of lessons 03-04. How many parameters (weights and biases) does "
        f"CausalSelfAttention({p['d_model']}, {p['n_heads']}) hold? (A number.)"
    )


def _q6_prompt() -> str:
    p = numbers()["q6"]
    return (
        f"Review of lesson 05. How many floating-point operations do the two products of "
        f"self-attention (Q Kᵀ and weights @ V) take for one sequence of n = {p['n']} tokens "
        f"and {p['heads']} heads of d_head = {p['d_head']}? (A number.)"
    )


_PROMPTS = {
    "q1": _q1_prompt,
    "q2": _q2_prompt,
    "q3": _q3_prompt,
    "q4": _q4_prompt,
    "q5": _q5_prompt,
    "q6": _q6_prompt,
}


def prompt(key: str) -> str:
    """Question ``key`` with the numbers of the current learner."""
    return _PROMPTS[key]()


def sheet() -> str:
    """Every question with the current learner's numbers, headed by who the learner is."""
    lines = [f"Numbers for learner {learner_id()!r}:"]
    lines += [f"{key}. {make()}" for key, make in _PROMPTS.items()]
    return "\n".join(lines)
