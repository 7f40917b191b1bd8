"""Lesson 06's tiny GPT: shapes, causality, the ablation switches, the KV cache, seeds, training.

The model is built from the contract's ``CausalSelfAttention`` and ``cached_attention``; these
tests hold it to what the lesson says about it: no position's logits depend on later tokens
(unless an ablation lets them), greedy decoding with a cache gives the same tokens as
recomputation, a seed fixes everything on the CPU, and a short seed-fixed training run on
repeating random tokens grows a previous-token head in layer 1 and an induction head in layer 2.
"""

from __future__ import annotations

import math

import pytest
import torch

import attnlib.torch as at
from attnlib.data import TEXTS, load_text
from attnlib.torch.gpt import (
    ABLATIONS,
    GPT,
    Block,
    GPTAttention,
    GPTConfig,
    entropy,
    head_scores,
    previous_token_score,
    sink_weight,
)
from attnlib.torch.train import (
    CharVocab,
    History,
    learning_rate,
    repeated_tokens,
    repeating_batch,
    split,
    train,
    windows,
)

pytestmark = pytest.mark.lesson06

V, T = 11, 9
SMALL = GPTConfig(V, block_size=16, d_model=24, n_heads=3, n_layers=2)
CAUSAL_ABLATIONS = ["no positions", "no 1/sqrt(d) scaling"]
LEAKY_ABLATIONS = ["no causal mask", "softmax over queries"]


def ids(B: int = 2, length: int = T, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (B, length), generator=torch.Generator().manual_seed(seed))


def model(config: GPTConfig = SMALL, seed: int = 0) -> GPT:
    return GPT(config, seed=seed, device="cpu").eval()


# ------------------------------------------------------------------------------ shapes


def test_logits_and_attention_weights_have_the_documented_shapes():
    m = model()
    x = ids(3)
    logits = m(x)
    assert logits.shape == (3, T, V) and logits.dtype == torch.float32
    logits2, maps = m(x, need_weights=True)
    assert len(maps) == SMALL.n_layers
    assert all(w.shape == (3, SMALL.n_heads, T, T) for w in maps)
    torch.testing.assert_close(logits2, logits)  # the explicit path equals the fused one
    stacked = m.attention_maps(x)
    assert stacked.shape == (SMALL.n_layers, 3, SMALL.n_heads, T, T)
    torch.testing.assert_close(stacked.sum(-1), torch.ones(2, 3, 3, T))  # rows sum to one


def test_the_parameters_are_those_of_the_stated_layout():
    m = model()
    d, L = SMALL.d_model, SMALL.n_layers
    block = 2 * 2 * d + (4 * d * d + 4 * d) + (8 * d * d + 5 * d)  # 2 LNs, attention, MLP
    expected = V * d + SMALL.block_size * d + L * block + 2 * d + d * V
    assert m.num_parameters() == expected
    names = set(dict(m.blocks[0].named_parameters()))
    assert names == {
        "ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
        "attn.proj.bias", "ln2.weight", "ln2.bias", "mlp.0.weight", "mlp.0.bias",
        "mlp.2.weight", "mlp.2.bias",
    }  # fmt: skip
    assert isinstance(m.blocks[0].attn, at.CausalSelfAttention)


def test_gpt_attention_is_causal_self_attention_with_switches():
    torch.manual_seed(0)
    x = torch.randn(2, 7, 24)
    plain = at.CausalSelfAttention(24, 3)
    ours = GPTAttention(24, 3)
    ours.load_state_dict(plain.state_dict())
    torch.testing.assert_close(ours(x), plain(x))
    out, w = ours(x, need_weights=True)
    torch.testing.assert_close(out, plain(x))
    torch.testing.assert_close(w, plain.attention_weights(x))


def test_a_block_is_pre_norm_attention_then_mlp():
    torch.manual_seed(1)
    block = Block(24, 3).eval()
    x = torch.randn(2, 5, 24)
    h = x + block.attn(block.ln1(x))
    expected = h + block.mlp(block.ln2(h))
    torch.testing.assert_close(block(x), expected)
    # The interface of the lesson's debugging exercise, whose reference it is.
    assert (block.n_heads, block.d_head) == (3, 8)
    out, w = block.attention(block.ln1(x))
    torch.testing.assert_close(out, block.attn(block.ln1(x)))
    assert w.shape == (2, 3, 5, 5) and torch.allclose(w.sum(-1), torch.ones(2, 3, 5))


# ------------------------------------------------------------------------------ causality


def changes_before(m: GPT, t: int) -> float:
    """How much the logits of positions < t move when the tokens from t on change."""
    x = ids(2, T, seed=3)
    y = x.clone()
    y[:, t:] = (y[:, t:] + 1 + torch.arange(T - t)) % V  # every later token different
    return (m(x)[:, :t] - m(y)[:, :t]).abs().max().item()


@pytest.mark.parametrize("ablation", [None, *CAUSAL_ABLATIONS])
def test_no_position_sees_the_future(ablation):
    config = SMALL if ablation is None else SMALL.ablate(ablation)
    m = model(config)
    for t in range(1, T):
        assert changes_before(m, t) == 0.0, f"{ablation}: logits before {t} changed"


@pytest.mark.parametrize("ablation", LEAKY_ABLATIONS)
def test_the_leaky_ablations_let_the_future_in(ablation):
    m = model(SMALL.ablate(ablation))
    assert changes_before(m, T // 2) > 1e-3


def test_softmax_over_queries_leaks_through_its_normaliser():
    # Column j is normalised over queries i >= j: weight (i, j) depends on later queries.
    m = model(SMALL.ablate("softmax over queries"))
    w = m.attention_maps(ids(1))[0, 0]  # (h, T, T)
    torch.testing.assert_close(w.sum(-2), torch.ones(SMALL.n_heads, T))  # columns sum to one
    assert (w.triu(1) == 0).all()  # still no weight above the diagonal ...
    assert changes_before(m, 1) > 1e-3  # ... yet position 0 depends on every later token


def test_prefix_loss_equals_the_loss_of_a_causal_model_and_exposes_a_leak():
    x = ids(2, T + 1, seed=4)
    inputs, targets = x[:, :-1], x[:, 1:]
    causal = model()
    assert math.isclose(causal.prefix_loss(inputs, targets), causal.loss(inputs, targets).item(),
                        rel_tol=1e-5)  # fmt: skip
    leaky = model(SMALL.ablate("no causal mask"))
    assert abs(leaky.prefix_loss(inputs, targets) - leaky.loss(inputs, targets).item()) > 1e-3


# ------------------------------------------------------------------------------ the ablations


def test_every_ablation_changes_exactly_its_own_switch():
    assert set(ABLATIONS) == {
        "no causal mask", "no positions", "no 1/sqrt(d) scaling", "softmax over queries"
    }  # fmt: skip
    for name in ABLATIONS:
        config = SMALL.ablate(name)
        assert not config.standard
        changed = {f for f in ("causal", "positions", "scaled", "softmax_axis")
                   if getattr(config, f) != getattr(SMALL, f)}  # fmt: skip
        assert changed == set(ABLATIONS[name])
    assert model(SMALL.ablate("no positions")).pos is None
    with pytest.raises(ValueError, match="unknown ablation 'no heads'"):
        SMALL.ablate("no heads")


def test_without_positions_the_model_cannot_tell_where_a_token_stands():
    m = model(SMALL.ablate("no positions"))
    x = torch.full((1, T), 5)  # the same token everywhere
    logits = m(x)[0]  # (T, V)
    torch.testing.assert_close(logits, logits[:1].expand(T, V))  # every position alike
    assert not torch.allclose(model()(x)[0], model()(x)[0, :1].expand(T, V))


def test_without_scaling_the_scores_grow_by_sqrt_d_head():
    x = ids(2)
    scaled, unscaled = model(), model(SMALL.ablate("no 1/sqrt(d) scaling"))
    unscaled.load_state_dict(scaled.state_dict())
    block_s, block_u = scaled.blocks[0], unscaled.blocks[0]
    h = scaled._embed(x)
    q, k, _ = block_s.attn._heads(block_s.ln1(h))
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    want = torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~causal, -math.inf), dim=-1)
    torch.testing.assert_close(block_u.attn.attention_weights(block_u.ln1(h)), want)


def test_without_scaling_attention_entropy_collapses_at_initialisation():
    config = GPTConfig(V, block_size=64, d_model=64, n_heads=2, n_layers=1)  # d_head = 32
    x = ids(4, 64, seed=5)
    ent = {}
    for name, c in (("scaled", config), ("unscaled", config.ablate("no 1/sqrt(d) scaling"))):
        ent[name] = entropy(model(c).attention_maps(x)[0, :, :, 32:]).mean().item()
    assert ent["unscaled"] < 0.6 * ent["scaled"], ent


# ------------------------------------------------------------------------------ decoding


@pytest.mark.parametrize("ablation", [None, *CAUSAL_ABLATIONS])
def test_greedy_decoding_with_a_kv_cache_gives_the_same_tokens(ablation):
    config = SMALL if ablation is None else SMALL.ablate(ablation)
    m = model(config, seed=2)
    prompt = ids(3, 4, seed=6)
    cached = m.generate(prompt, 12, greedy=True, use_cache=True)
    again = m.generate(prompt, 12, greedy=True, use_cache=False)
    assert cached.shape == (3, 16) and torch.equal(cached[:, :4], prompt)
    assert torch.equal(cached, again)


def test_sampling_repeats_for_a_seed_and_uses_the_cache_faithfully():
    m = model(seed=3)
    prompt = ids(2, 3, seed=7)
    a = m.generate(prompt, 10, seed=11, temperature=0.8, top_k=5)
    b = m.generate(prompt, 10, seed=11, temperature=0.8, top_k=5)
    c = m.generate(prompt, 10, seed=11, temperature=0.8, top_k=5, use_cache=False)
    assert torch.equal(a, b) and torch.equal(a, c)
    assert m.generate(prompt, 0).shape == prompt.shape


def test_a_cache_is_refused_where_it_cannot_be_right():
    for name in LEAKY_ABLATIONS:
        m = model(SMALL.ablate(name))
        with pytest.raises(ValueError, match="use_cache=False"):
            m.generate(ids(1, 3), 2, use_cache=True)
        assert m.generate(ids(1, 3), 2, use_cache=False).shape == (1, 5)
    with pytest.raises(ValueError, match=r"idx \(1, 10\) plus 7 new tokens .* block_size = 16"):
        model().generate(ids(1, 10), 7)
    long = model().generate(ids(1, 10), 9, use_cache=False)  # recomputation crops the context
    assert long.shape == (1, 19)


def test_generation_leaves_the_training_mode_as_it_was():
    m = model().train()
    m.generate(ids(1, 2), 3)
    assert m.training


# ------------------------------------------------------------------------------ seeds, devices


def test_a_seed_fixes_the_parameters_and_the_callers_random_state_is_untouched():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b, c = model(seed=5), model(seed=5), model(seed=6)
    assert torch.equal(torch.random.get_rng_state(), before)
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name
    assert not torch.equal(a.tok.weight, c.tok.weight)


def test_initial_queries_and_keys_have_entries_of_variance_about_one():
    config = GPTConfig(V, block_size=64, d_model=64, n_heads=4, n_layers=1)
    m = model(config)
    x = m._embed(ids(8, 64, seed=8))
    q, k, _ = m.blocks[0].attn._heads(m.blocks[0].ln1(x))
    assert 0.7 < q.var().item() < 1.4 and 0.7 < k.var().item() < 1.4


def test_training_is_deterministic_on_the_cpu_for_a_seed():
    data = torch.arange(500) % V
    runs = []
    for _ in range(2):
        m = GPT(SMALL, seed=1, device="cpu")
        runs.append((train(m, data, steps=6, batch_size=4, T=8, progress=False, seed=2), m))
    (h1, m1), (h2, m2) = runs
    assert h1.loss == h2.loss
    for p, q in zip(m1.parameters(), m2.parameters(), strict=True):
        assert torch.equal(p, q)


def test_the_model_goes_to_the_best_device_by_default():
    assert GPT(SMALL).device.type == at.device().type


@pytest.mark.gpu
@pytest.mark.skipif(at.device().type == "cpu", reason="no CUDA or MPS device")
def test_on_an_accelerator_the_model_and_its_cache_agree_with_the_cpu():
    cpu = model(seed=4)
    gpu = GPT(SMALL, seed=4, device=at.device()).eval()
    x = ids(2)
    torch.testing.assert_close(gpu(x.to(gpu.device)).cpu(), cpu(x), rtol=1e-3, atol=1e-3)
    out = gpu.generate(ids(1, 3), 8, greedy=True)
    assert torch.equal(out, gpu.generate(ids(1, 3), 8, greedy=True, use_cache=False))


# ------------------------------------------------------------------------------ bad input


def test_bad_input_raises_value_errors_that_name_the_shapes():
    m = model()
    cases = [
        (lambda: m(torch.zeros(T, dtype=torch.long)), r"idx \(9,\) has 1 axes; expected 2"),
        (lambda: m(torch.zeros(1, 17, dtype=torch.long)), r"idx \(1, 17\) has T = 17 tokens"),
        (lambda: m(torch.zeros(1, 3)), "dtype torch.float32; token ids are integers"),
        (lambda: m(torch.full((1, 3), V)), f"ids from {V} to {V}; the vocabulary has ids 0 to"),
        (lambda: m.loss(ids(2), ids(2, 4)), r"targets \(2, 4\) must have the shape of idx"),
        (lambda: m.generate(ids(1), -1), "max_new_tokens must be a non-negative integer"),
        (lambda: m.generate(ids(1), 2, temperature=0), "temperature must be > 0"),
        (lambda: GPTConfig(V, d_model=30, n_heads=4), "d_model"),
        (lambda: GPTConfig(V, softmax_axis=0), "softmax_axis must be -1"),
        (lambda: GPTConfig(0), "vocab_size must be a positive integer"),
        (lambda: GPT("config"), "config must be a GPTConfig"),
        (lambda: m.blocks[0].attn(torch.zeros(2, 3, 8)), r"x \(2, 3, 8\) has 8 features"),
        (lambda: windows(torch.arange(5), 2, 5, torch.Generator()), r"data \(5,\) is too short"),
        (lambda: train(m, torch.arange(50), steps=1, T=17), "longer than the model's block_size"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


# ------------------------------------------------------------------------------ data, training


def test_the_shipped_text_loads_is_small_and_has_its_provenance_written_down():
    text = load_text()
    assert 50_000 < len(text.encode()) < 300_000
    from importlib import resources

    readme = resources.files("attnlib.data").joinpath("README.md").read_text(encoding="utf-8")
    for name, file in TEXTS.items():
        assert file in readme and name in readme
    assert "BSD-3-Clause" in readme
    with pytest.raises(ValueError, match="unknown text 'shakespeare'"):
        load_text("shakespeare")


def test_characters_round_trip_and_the_split_keeps_every_tenth_stretch():
    text = load_text()
    vocab = CharVocab(text)
    encoded = vocab.encode(text[:500])
    assert vocab.decode(encoded) == text[:500] and len(vocab) == len(set(text))
    with pytest.raises(ValueError, match="not in the vocabulary"):
        vocab.encode("\x00")
    data = torch.arange(10_000)
    tr, va = split(data, every=10, chunk=100)
    assert len(va) == 1000 and len(tr) == 9000 and torch.equal(va[:100], torch.arange(900, 1000))


def test_windows_and_repeating_batches_have_their_targets_one_step_ahead():
    data = torch.arange(100)
    x, y = windows(data, 4, 10, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 10) and torch.equal(y, x + 1)
    x, y = repeating_batch(torch.Generator().manual_seed(0), 16, 24, 7, (3, 8))
    assert x.shape == y.shape == (16, 24) and torch.equal(x[:, 1:], y[:, :-1])
    periodic = [any(torch.equal(x[b, p:], x[b, :-p]) for p in range(3, 9)) for b in range(16)]
    assert all(periodic)
    r = repeated_tokens(3, 5, 4, V, seed=1)
    assert r.shape == (3, 20) and torch.equal(r[:, 5:], r[:, :-5])


def test_training_lowers_the_loss_reports_history_and_calls_back():
    text = load_text()[:20_000]
    vocab = CharVocab(text)
    tr, va = split(vocab.encode(text), chunk=500)
    config = GPTConfig(len(vocab), block_size=32, d_model=32, n_heads=2, n_layers=1)
    m = GPT(config, seed=0, device="cpu")
    calls = []

    def record(h: History) -> None:
        calls.append(h.steps[-1])

    history = train(m, tr, steps=60, batch_size=8, val_data=va, eval_every=20, callback=record,
                    progress=False, label="x")  # fmt: skip
    assert isinstance(history, History) and history.label == "x"
    assert calls == [20, 40, 60] and history.val_steps == [20, 40, 60]
    assert history.steps == list(range(1, 61)) and history.tokens == 60 * 8 * 32
    assert history.smoothed(10)[-1] < history.loss[0] - 0.5
    assert history.seconds > 0 and not m.training
    assert math.isclose(learning_rate(0, 100, 1.0, 10), 0.1)
    assert math.isclose(learning_rate(100, 100, 1.0, 10), 0.1)


def test_head_scores_read_previous_token_induction_and_sink_heads():
    Tn, period = 12, 4
    prev = torch.zeros(Tn, Tn)
    prev[0, 0] = 1
    prev[torch.arange(1, Tn), torch.arange(Tn - 1)] = 1
    induction = torch.zeros(Tn, Tn)
    induction[torch.arange(Tn), torch.clamp(torch.arange(Tn) - period + 1, min=0)] = 1
    sink = torch.zeros(Tn, Tn)
    sink[:, 0] = 1
    maps = torch.stack([prev, induction, sink])[None, None]  # (1 layer, 1, 3 heads, T, T)
    scores = head_scores(maps, period)
    # Rows before the first repeat have nowhere to go but key 0: query 1's previous token.
    n = Tn - 1
    torch.testing.assert_close(scores["previous"][0], torch.tensor([1.0, 1 / n, 1 / n]))
    torch.testing.assert_close(scores["induction"][0], torch.tensor([0.0, 1.0, 0.0]))
    torch.testing.assert_close(scores["sink"][0], torch.tensor([1 / n, (period - 1) / n, 1.0]))
    assert previous_token_score(prev).item() == 1.0 and sink_weight(sink).item() == 1.0


# ------------------------------------------------------------------------------ induction heads

INDUCTION = GPTConfig(32, block_size=32, d_model=64, n_heads=4, n_layers=2)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_seed_fixed_run_grows_a_previous_token_head_then_an_induction_head():
    """Layer 1 learns to look one token back; layer 2 uses that to find the token after the
    earlier occurrence of the current one. Both are read off with ``induction_score`` on
    sequences that repeat with a period the model never saw as a fixed offset in training."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: one thread is as fast, and the run repeats exactly
    try:
        m = GPT(INDUCTION, seed=0, device="cpu")
        history = train(m, lambda g: repeating_batch(g, 32, 32, 32, (3, 16)), steps=600,
                        T=32, lr=3e-3, progress=False, seed=0)  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    period = 8
    maps = m.attention_maps(repeated_tokens(64, period, 4, 32, seed=123))  # (2, 64, h, T, T)
    induction = at.induction_score(maps, period).mean(1)  # (2 layers, h)
    previous = previous_token_score(maps).mean(1)  # (2 layers, h)
    chance = math.log(32 / period) / (32 - period)  # a head spread evenly over its prefix
    assert history.final_loss < 1.6, history.final_loss
    assert previous[0].max() > 0.3, previous  # a previous-token head in layer 1 ...
    assert induction[1].max() > 3 * chance and induction[1].max() > 0.15, induction
    assert induction[1].max() > 2 * induction[0].max()  # ... the induction head in layer 2
    assert previous[0].max() > 2 * previous[1].max()


def test_a_run_stopped_early_repeats_the_first_steps_of_a_full_run():
    data = torch.arange(500) % V
    full = train(GPT(SMALL, seed=1, device="cpu"), data, steps=8, batch_size=4, T=8,
                 progress=False)  # fmt: skip
    early = train(GPT(SMALL, seed=1, device="cpu"), data, steps=8, until=3, batch_size=4, T=8,
                  progress=False)  # fmt: skip
    assert early.loss == full.loss[:3] and early.steps == [1, 2, 3]
    with pytest.raises(ValueError, match="until = 9 is beyond the 8 steps"):
        train(model(), data, steps=8, until=9, T=8, progress=False)


def test_silencing_a_head_zeroes_what_it_adds_and_is_undone_afterwards():
    m = model()
    x = ids(2)
    before = m(x)
    attn = m.blocks[0].attn
    h = m._embed(x)
    q, k, v = attn._heads(m.blocks[0].ln1(h))
    y = attn._weights(q, k) @ v  # (B, h, T, d_head)
    y[:, 1] = 0
    expected = attn.proj(y.transpose(1, 2).reshape(2, T, SMALL.d_model))
    with m.silence([(0, 1)]) as same:
        assert same is m and attn.silenced == (1,)
        torch.testing.assert_close(attn(m.blocks[0].ln1(h)), expected)
        changed = m(x)
        cached = m.generate(ids(1, 3), 5, greedy=True)
        assert torch.equal(cached, m.generate(ids(1, 3), 5, greedy=True, use_cache=False))
    assert attn.silenced == () and torch.equal(m(x), before)
    assert not torch.allclose(changed, before)
    with pytest.raises(ValueError, match=r"head \(2, 0\) does not exist"), m.silence([(2, 0)]):
        pass
