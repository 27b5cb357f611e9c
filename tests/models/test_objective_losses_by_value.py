"""Every objective's loss, checked by value against an independent route.

For each objective in the registry the full loss on a tiny fixed batch is recomputed here in
float64 numpy, one sample (or pair) at a time, from nothing but the model's encoder and decoder
outputs (and the objective's own discriminator or adversary, used as black boxes): Gaussian KL in
closed form, the Bernoulli NLL as softplus(l) − x·l, the unbiased MMD as a double loop over 3
points, β-TCVAE's minibatch-weighted estimates as explicit log-sum-exps, CascadeVAE's category
matching by brute force over every assignment, LieGroupVAE's penalties as loops over basis pairs.
The objective's loss must agree to 1e-5 (relative).

Then every weight (β, γ, λ, the KL warm-up weight, the cascade's β_low and β_high, the Lie
penalties' weights) is moved, and the loss must move by exactly Δweight × the term it multiplies,
the term again computed independently. A sign flip, a weight moved to another term or a dropped
term fails here (benchmarks/loss_mutants.py checks that each such mutant is caught).

Objectives are built through the public API: ``models.build(config)`` and
``models.build_objective(config, dataset_size)``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch

from models import ModelConfig, build, build_objective


def _schedule_class():
    import models

    if hasattr(models, "Schedule"):
        return models.Schedule
    from models.objectives import Schedule

    return Schedule


Schedule = _schedule_class()
DATASET_SIZE = 1000
RTOL = 1e-5


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def batch(n, seed=0):
    """n binary-ish 64×64 images (float32 in [0, 1]) with a few grey pixels."""
    rng = np.random.default_rng(seed)
    x = (rng.random((n, 1, 64, 64)) < 0.3).astype(np.float32)
    x[:, :, :4, :4] = 0.5
    return torch.from_numpy(x)


# -- the independent mathematics (float64 numpy) --------------------------------------------------


def softplus(a):
    return np.maximum(a, 0) + np.log1p(np.exp(-np.abs(a)))


def bernoulli(logits, x):
    """Σ_pixels −[x log σ(l) + (1 − x) log(1 − σ(l))] per image."""
    return np.array([np.sum(softplus(li) - xi * li) for li, xi in zip(logits, x)])


def squared(logits, x):
    return np.array([np.sum((1 / (1 + np.exp(-li)) - xi) ** 2) for li, xi in zip(logits, x)])


def kl_standard(mean, logvar):
    """KL(N(m, e^lv) ‖ N(0, 1)) per sample, summed over dimensions."""
    return np.array([0.5 * np.sum(m**2 + np.exp(v) - v - 1) for m, v in zip(mean, logvar)])


def kl_between(m1, v1, m2, v2):
    """KL(N(m1, e^v1) ‖ N(m2, e^v2)) for one dimension."""
    return 0.5 * (v2 - v1 + (math.exp(v1) + (m1 - m2) ** 2) / math.exp(v2) - 1)


def log_normal(z, m, v):
    return -0.5 * (math.log(2 * math.pi) + v + (z - m) ** 2 / math.exp(v))


def logsumexp(values):
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def imq(a, b):
    d = float(np.sum((a - b) ** 2))
    return sum(10 * s / (10 * s + d) for s in (0.1, 0.2, 0.5, 1, 2, 5, 10))


def np64(t):
    return t.detach().double().numpy()


def encode(model, x):
    with torch.no_grad():
        mean, logvar = model.encode(x)
    return np64(mean), np64(logvar)


def decode(model, z):
    with torch.no_grad():
        return np64(model.decode(torch.as_tensor(z, dtype=torch.float32)))


def sample(mean, logvar, noise):
    return mean + np64(noise) * np.exp(0.5 * logvar)


def l1(logvar):
    return float(np.mean(np.abs(logvar).sum(1)))


# -- one independent route per objective: (config, model, objective, noise, x, schedule) → terms -----


def vae_like(config, model, objective, noise, x, schedule):
    mean, logvar = encode(model, x)
    z = sample(mean, logvar, noise["posterior"])
    reconstruction = bernoulli(decode(model, z), np64(x)).mean()
    kl = kl_standard(mean, logvar).mean()
    beta = 1.0 if config.objective == "vae" else config.beta
    return {
        "loss": reconstruction + beta * schedule.kl_weight * kl,
        "reconstruction": reconstruction,
        "kl": kl,
        "beta": schedule.kl_weight * kl,
        "kl_weight": beta * kl,
    }


def annealed(config, model, objective, noise, x, schedule):
    mean, logvar = encode(model, x)
    z = sample(mean, logvar, noise["posterior"])
    reconstruction = bernoulli(decode(model, z), np64(x)).mean()
    kl = kl_standard(mean, logvar).mean()
    gap = abs(kl - schedule.capacity)
    return {"loss": reconstruction + config.gamma * gap, "reconstruction": reconstruction, "gamma": gap}


def factor_vae(config, model, objective, noise, x, schedule):
    mean, logvar = encode(model, x)
    z = sample(mean, logvar, noise["posterior"])
    reconstruction = bernoulli(decode(model, z), np64(x)).mean()
    kl = kl_standard(mean, logvar).mean()
    with torch.no_grad():
        odds = np64(objective.discriminator(torch.as_tensor(z, dtype=torch.float32)))
    tc = float(np.mean([o[0] - o[1] for o in odds]))
    return {
        "loss": reconstruction + schedule.kl_weight * kl + config.gamma * tc,
        "gamma": tc,
        "kl_weight": kl,
        "total_correlation": tc,
    }


def beta_tcvae(config, model, objective, noise, x, schedule):
    mean, logvar = encode(model, x)
    z = sample(mean, logvar, noise["posterior"])
    reconstruction = bernoulli(decode(model, z), np64(x)).mean()
    n, k = z.shape
    log_norm = math.log(n * DATASET_SIZE)
    mi, tc, dw = [], [], []
    for i in range(n):
        log_q_given_x = sum(log_normal(z[i, d], mean[i, d], logvar[i, d]) for d in range(k))
        log_q = (
            logsumexp(
                [sum(log_normal(z[i, d], mean[j, d], logvar[j, d]) for d in range(k)) for j in range(n)]
            )
            - log_norm
        )
        log_product = sum(
            logsumexp([log_normal(z[i, d], mean[j, d], logvar[j, d]) for j in range(n)]) - log_norm
            for d in range(k)
        )
        log_p = sum(log_normal(z[i, d], 0.0, 0.0) for d in range(k))
        mi.append(log_q_given_x - log_q)
        tc.append(log_q - log_product)
        dw.append(log_product - log_p)
    mi, tc, dw = np.mean(mi), np.mean(tc), np.mean(dw)
    w = schedule.kl_weight
    return {
        "loss": reconstruction + w * (mi + config.beta * tc + dw),
        "beta": w * tc,
        "kl_weight": mi + config.beta * tc + dw,
        "mutual_information": mi,
        "total_correlation": tc,
        "dimension_wise_kl": dw,
    }


def wae_mmd(config, model, objective, noise, x, schedule):
    mean, logvar = encode(model, x)
    z = sample(mean, logvar, noise["posterior"])
    prior = np64(noise["prior"])
    reconstruction = squared(decode(model, z), np64(x)).mean()
    n = len(z)
    same = sum(imq(z[i], z[j]) + imq(prior[i], prior[j]) for i in range(n) for j in range(n) if i != j)
    cross = sum(imq(z[i], prior[j]) for i in range(n) for j in range(n))
    mmd = same / (n * (n - 1)) - 2 * cross / n**2
    return {
        "loss": reconstruction + config.mmd_weight * mmd + config.logvar_l1_weight * l1(logvar),
        "mmd_weight": mmd,
        "logvar_l1_weight": l1(logvar),
        "mmd": mmd,
    }


def wae_gan(config, model, objective, noise, x, schedule):
    mean, logvar = encode(model, x)
    z = sample(mean, logvar, noise["posterior"])
    reconstruction = squared(decode(model, z), np64(x)).mean()
    with torch.no_grad():
        code_logits = np64(objective.adversary(torch.as_tensor(z, dtype=torch.float32)))
    penalty = float(np.mean(softplus(-code_logits)))
    return {
        "loss": reconstruction + config.adversarial_weight * penalty + config.logvar_l1_weight * l1(logvar),
        "adversarial_weight": penalty,
        "logvar_l1_weight": l1(logvar),
    }


def ada_gvae(config, model, objective, noise, x, schedule):
    mean, logvar = encode(model, x)
    half = len(x) // 2
    mean, logvar = mean.copy(), logvar.copy()
    for i in range(half):  # rows i and half + i are a pair
        j = half + i
        if config.pair_divergence == "symmetric_kl":
            delta = [
                0.5
                * (
                    kl_between(mean[i, d], logvar[i, d], mean[j, d], logvar[j, d])
                    + kl_between(mean[j, d], logvar[j, d], mean[i, d], logvar[i, d])
                )
                for d in range(mean.shape[1])
            ]
        else:
            delta = [
                2 * kl_between(mean[i, d], logvar[i, d], mean[j, d], logvar[j, d])
                for d in range(mean.shape[1])
            ]
        threshold = 0.5 * (max(delta) + min(delta))
        for d, value in enumerate(delta):
            if value < threshold:
                m = 0.5 * (mean[i, d] + mean[j, d])
                v = math.log(0.5 * (math.exp(logvar[i, d]) + math.exp(logvar[j, d])))
                mean[i, d] = mean[j, d] = m
                logvar[i, d] = logvar[j, d] = v
    z = sample(mean, logvar, noise["posterior"])
    reconstruction = bernoulli(decode(model, z), np64(x)).mean()  # = ½(rec₁ + rec₂) averaged over pairs
    kl = kl_standard(mean, logvar).mean()
    return {
        "loss": reconstruction + config.beta * schedule.kl_weight * kl,
        "beta": schedule.kl_weight * kl,
        "kl_weight": config.beta * kl,
    }


def cascade_vae(config, model, objective, noise, x, schedule):
    with torch.no_grad():
        mean, logvar = (np64(t) for t in model.encode_continuous(x))
    z = sample(mean, logvar, noise["posterior"])
    n, k = len(z), config.discrete_categories
    eye = np.eye(k)
    xs = np64(x)
    if schedule.step >= config.discrete_warmup_steps:
        costs = np.array(
            [
                [
                    bernoulli(
                        decode(model, np.concatenate([z[i : i + 1], eye[c : c + 1]], 1)), xs[i : i + 1]
                    )[0]
                    for c in range(k)
                ]
                for i in range(n)
            ]
        )

        def total(assignment):
            counts = np.bincount(assignment, minlength=k)
            return sum(costs[i, a] for i, a in enumerate(assignment)) + config.duplicate_penalty * sum(
                c * (c - 1) / 2 for c in counts
            )

        best = min(itertools.product(range(k), repeat=n), key=lambda a: total(np.array(a)))
        category = eye[list(best)]
    else:
        category = np.zeros((n, k))
    reconstruction = bernoulli(decode(model, np.concatenate([z, category], 1)), xs).mean()
    kl_d = np.mean(
        [
            [0.5 * (mean[i, d] ** 2 + math.exp(logvar[i, d]) - logvar[i, d] - 1) for d in range(z.shape[1])]
            for i in range(n)
        ],
        axis=0,
    )
    released = np.array([schedule.step >= (d + 1) * config.cascade_steps for d in range(z.shape[1])])
    betas = np.where(released, config.beta_low, config.beta_high)
    weighted = float(np.sum(betas * kl_d))
    w = schedule.kl_weight
    return {
        "loss": reconstruction + w * weighted,
        "beta_low": w * kl_d[released].sum(),
        "beta_high": w * kl_d[~released].sum(),
        "kl_weight": weighted,
    }


def lie_group_vae(config, model, objective, noise, x, schedule):
    with torch.no_grad():
        group, mean, logvar = (np64(t) for t in model.encode_group(x))
    z = sample(mean, logvar, noise["posterior"])
    basis = np64(model.lie_basis)
    exp_group = np.stack([_expm(np.einsum("k,kij->ij", zi, basis)).ravel() for zi in z])
    reads_encoder = float(noise["group_choice"]) < config.encoder_group_probability
    with torch.no_grad():
        logits = np64(
            model.decoder(torch.as_tensor(group if reads_encoder else exp_group, dtype=torch.float32))
        )
    reconstruction = squared(logits, np64(x)).mean()
    kl = kl_standard(mean, logvar).mean()
    group_reconstruction = float(np.mean(np.sum((group - exp_group) ** 2, 1)))
    k = len(basis)
    pairs = [(i, j) for i in range(k) for j in range(k) if i != j]
    hessian = sum(np.sum((basis[i] @ basis[j]) ** 2) for i, j in pairs) / k**2
    commutator = sum(np.sum((basis[i] @ basis[j] - basis[j] @ basis[i]) ** 2) for i, j in pairs) / k**2
    w = schedule.kl_weight
    loss = (
        reconstruction
        + config.beta * w * kl
        + config.group_reconstruction_weight * group_reconstruction
        + config.hessian_weight * hessian
        + config.commutator_weight * commutator
    )
    return {
        "loss": loss,
        "beta": w * kl,
        "kl_weight": config.beta * kl,
        "group_reconstruction_weight": group_reconstruction,
        "hessian_weight": hessian,
        "commutator_weight": commutator,
    }


def dip_vae(config, model, objective, noise, x, schedule):
    mean, logvar = encode(model, x)
    z = sample(mean, logvar, noise["posterior"])
    reconstruction = bernoulli(decode(model, z), np64(x)).mean()
    kl = kl_standard(mean, logvar).mean()
    n, k = mean.shape
    average = [sum(mean[b, i] for b in range(n)) / n for i in range(k)]
    cov = [
        [sum((mean[b, i] - average[i]) * (mean[b, j] - average[j]) for b in range(n)) / n for j in range(k)]
        for i in range(k)
    ]
    off = sum(cov[i][j] ** 2 for i in range(k) for j in range(k) if i != j)
    diagonal = sum((cov[i][i] - 1) ** 2 for i in range(k))
    penalty = off + 10 * diagonal  # λ_d = 10·λ_od, disentanglement_lib's DIP-VAE-I
    return {
        "loss": reconstruction + schedule.kl_weight * kl + config.gamma * penalty,
        "gamma": penalty,
        "kl_weight": kl,
    }


def _expm(a, terms=30):
    """exp(A) by scaling and squaring with a Taylor series (independent of torch.linalg.matrix_exp)."""
    squarings = max(0, int(math.ceil(math.log2(max(np.abs(a).sum(1).max(), 1e-12)))) + 1)
    a = a / 2**squarings
    result, term = np.eye(len(a)), np.eye(len(a))
    for n in range(1, terms):
        term = term @ a / n
        result = result + term
    for _ in range(squarings):
        result = result @ result
    return result


# -- the cases: objective, config, batch size, schedule, the weights to move ---------------------

CASES = {
    "dip_vae": (
        dict(gamma=4.0),
        5,
        dict(step=0, kl_weight=0.6),
        {"gamma": (1.0, 20.0), "kl_weight": (0.2, 0.9)},
        dip_vae,
    ),
    "vae": (dict(beta=3.0), 4, dict(step=0, kl_weight=0.7), {"kl_weight": (0.2, 0.9)}, vae_like),
    "beta_vae": (
        dict(beta=3.0),
        4,
        dict(step=0, kl_weight=0.7),
        {"beta": (1.0, 8.0), "kl_weight": (0.2, 0.9)},
        vae_like,
    ),
    "annealed_vae": (dict(gamma=20.0), 4, dict(step=0, capacity=3.0), {"gamma": (5.0, 50.0)}, annealed),
    "factor_vae": (
        dict(gamma=10.0, discriminator_width=64),
        4,
        dict(step=0, kl_weight=0.6),
        {"gamma": (10.0, 60.0), "kl_weight": (0.2, 0.9)},
        factor_vae,
    ),
    "beta_tcvae": (
        dict(beta=6.0),
        5,
        dict(step=0, kl_weight=0.8),
        {"beta": (1.0, 9.0), "kl_weight": (0.3, 1.0)},
        beta_tcvae,
    ),
    "wae_mmd": (
        dict(mmd_weight=10.0, logvar_l1_weight=0.5),
        3,
        dict(step=0),
        {"mmd_weight": (10.0, 300.0), "logvar_l1_weight": (0.001, 2.0)},
        wae_mmd,
    ),
    "wae_gan": (
        dict(adversarial_weight=10.0, logvar_l1_weight=0.5, adversary_width=32, prior_std=2.0),
        4,
        dict(step=0),
        {"adversarial_weight": (1.0, 40.0), "logvar_l1_weight": (0.001, 2.0)},
        wae_gan,
    ),
    "ada_gvae": (
        dict(beta=2.0),
        6,
        dict(step=0, kl_weight=0.5),
        {"beta": (1.0, 6.0), "kl_weight": (0.2, 1.0)},
        ada_gvae,
    ),
    "cascade_vae": (
        dict(
            latent_dim=4,
            cascade_steps=5,
            discrete_categories=3,
            duplicate_penalty=30.0,
            beta_low=2.0,
            beta_high=10.0,
        ),
        4,
        dict(step=12, kl_weight=0.5),
        {"beta_low": (1.0, 5.0), "beta_high": (4.0, 20.0), "kl_weight": (0.2, 1.0)},
        cascade_vae,
    ),
    "lie_group_vae": (
        dict(
            latent_dim=3,
            lie_matrix_size=3,
            beta=2.0,
            group_reconstruction_weight=0.5,
            hessian_weight=7.0,
            commutator_weight=3.0,
            lie_basis_init_std=0.3,
        ),
        4,
        dict(step=0, kl_weight=0.5),
        {
            "beta": (1.0, 4.0),
            "group_reconstruction_weight": (0.1, 3.0),
            "hessian_weight": (1.0, 40.0),
            "commutator_weight": (0.0, 5.0),
            "kl_weight": (0.2, 1.0),
        },
        lie_group_vae,
    ),
}


def test_every_registered_objective_has_a_value_test():
    from models.config import OBJECTIVES

    assert set(OBJECTIVES) == set(CASES), "add the new objective's independent route to CASES"


def run(name, overrides=None, schedule_overrides=None, *, model=None, group_choice=None, seed=0):
    settings, n, schedule, _, route = CASES[name]
    config = ModelConfig(objective=name, **{**settings, **(overrides or {})})
    model = build(config) if model is None else model
    objective = build_objective(config, DATASET_SIZE)
    x = batch(n, seed)
    noise = objective.draw_noise(torch.Generator().manual_seed(seed), n, "cpu")
    if group_choice is not None:
        noise["group_choice"] = torch.tensor(group_choice)
    schedule = Schedule(**{**schedule, **(schedule_overrides or {})})
    with torch.no_grad():
        terms = objective(model, x, x, noise, schedule)
    return config, model, objective, noise, x, schedule, terms, route


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_full_loss_equals_the_independent_route(name):
    choices = [0.1, 0.9] if name == "lie_group_vae" else [None]  # the decoder reads g_E, then g(z)
    for choice in choices:
        config, model, objective, noise, x, schedule, terms, route = run(name, group_choice=choice)
        expected = route(config, model, objective, noise, x, schedule)
        assert float(terms["loss"]) == pytest.approx(expected["loss"], rel=RTOL), name
        for term in ("mutual_information", "total_correlation", "dimension_wise_kl", "mmd"):
            if term in expected and term in terms:
                assert float(terms[term]) == pytest.approx(expected[term], rel=RTOL, abs=1e-6), term


@pytest.mark.parametrize("name, weight", [(n, w) for n in sorted(CASES) for w in CASES[n][3]])
def test_each_weight_moves_the_loss_by_weight_times_its_term(name, weight):
    low, high = CASES[name][3][weight]
    moves_schedule = weight == "kl_weight"

    def loss_at(value, model=None):
        overrides = None if moves_schedule else {weight: value}
        schedule = {"kl_weight": value} if moves_schedule else None
        return run(
            name, overrides, schedule, model=model, group_choice=0.9 if name == "lie_group_vae" else None
        )

    config, model, objective, noise, x, schedule, terms_low, route = loss_at(low)
    *_, terms_high, _ = loss_at(high, model=model)
    term = route(config, model, objective, noise, x, schedule)[weight]
    change = float(terms_high["loss"]) - float(terms_low["loss"])
    assert change == pytest.approx((high - low) * term, rel=1e-4, abs=1e-3), (name, weight, term)
    assert abs((high - low) * term) > 1e-2, "the term must be large enough to see"


def test_vae_ignores_beta():
    low = run("vae", {"beta": 1.0})[-2]["loss"]
    high = run("vae", {"beta": 50.0})[-2]["loss"]
    assert float(low) == float(high)


@pytest.mark.parametrize("divergence", ["symmetric_kl", "kl"])
def test_ada_gvae_with_either_divergence(divergence):
    config, model, objective, noise, x, schedule, terms, route = run(
        "ada_gvae", {"pair_divergence": divergence}
    )
    assert float(terms["loss"]) == pytest.approx(
        route(config, model, objective, noise, x, schedule)["loss"], rel=RTOL
    )


class PosteriorStub(torch.nn.Module):
    """A model whose posteriors are given (one pair of images → the rows of ``mean``/``logvar``)
    and whose decoder is a fixed linear map: lets a test choose the pair's divergences."""

    def __init__(self, mean, logvar):
        super().__init__()
        self.mean, self.logvar = torch.tensor(mean), torch.tensor(logvar)
        self.weight = torch.nn.Parameter(torch.linspace(-1, 1, 3 * 64 * 64).view(3, 1, 64, 64))

    def encode(self, x):
        return self.mean, self.logvar

    def decode(self, z):
        return torch.einsum("bk,kchw->bchw", z, self.weight)


@pytest.mark.parametrize(
    "divergence, shared", [("symmetric_kl", [False, False, True]), ("kl", [False, True, True])]
)
def test_ada_gvae_divergences_share_different_dimensions(divergence, shared):
    """Dimension 0 differs in variance only (KL(q1‖q2) = 8.04, KL(q2‖q1) = 1.02), dimension 1 in
    mean only (3.125 both ways), dimension 2 not at all. The symmetrised KL (D21) gives
    [4.53, 3.125, 0], threshold 2.27: only dimension 2 is shared; disentanglement_lib's 2·KL(q1‖q2)
    gives [16.1, 6.25, 0], threshold 8.04: dimensions 1 and 2 are."""
    from models.objectives import ada_gvae_aggregate

    mean = [[0.0, 0.0, 0.3], [0.0, 2.5, 0.3]]
    logvar = [[0.0, 0.0, -1.0], [-3.0, 0.0, -1.0]]
    m1, lv1, m2, lv2 = (torch.tensor([row]) for row in (mean[0], logvar[0], mean[1], logvar[1]))
    assert ada_gvae_aggregate(m1, lv1, m2, lv2, divergence)[-1][0].tolist() == shared
    config = ModelConfig(objective="ada_gvae", latent_dim=3, beta=2.0, pair_divergence=divergence)
    objective = build_objective(config, DATASET_SIZE)
    model = PosteriorStub(mean, logvar)
    x = batch(2)
    noise = objective.draw_noise(torch.Generator().manual_seed(0), 2, "cpu")
    schedule = Schedule(step=0, kl_weight=0.5)
    with torch.no_grad():
        terms = objective(model, x, x, noise, schedule)
    expected = ada_gvae(config, model, objective, noise, x, schedule)
    assert float(terms["loss"]) == pytest.approx(expected["loss"], rel=RTOL)
    assert float(terms["shared_dimensions"]) == sum(shared)


def test_cascade_before_the_discrete_warmup_decodes_a_zero_category():
    config, model, objective, noise, x, schedule, terms, route = run(
        "cascade_vae", {"discrete_warmup_steps": 100}
    )
    assert float(terms["loss"]) == pytest.approx(
        route(config, model, objective, noise, x, schedule)["loss"], rel=RTOL
    )


def test_annealed_capacity_above_and_below_the_kl():
    for capacity in (0.0, 1e4):  # |KL − C| on both sides of the kink
        config, model, objective, noise, x, schedule, terms, route = run(
            "annealed_vae", None, {"capacity": capacity}
        )
        assert float(terms["loss"]) == pytest.approx(
            route(config, model, objective, noise, x, schedule)["loss"], rel=RTOL
        )


def _own_loss_check(name):
    config, model, objective, noise, x, schedule, terms, _ = run(name)
    aux = {k: v for k, v in terms.items() if k.startswith("_")}
    with torch.no_grad():
        return config, objective, noise, aux, float(objective.own_loss(aux, noise))


def test_factor_vae_discriminator_loss_by_hand():
    """Cross-entropy of the discriminator: the first half of the codes labelled 0 (joint), the
    second half, each dimension permuted by its keys' argsort, labelled 1 (product of marginals)."""
    config, objective, noise, aux, loss = _own_loss_check("factor_vae")
    codes = np64(aux["_codes"])
    half = len(codes) // 2
    keys = np64(noise["permutation"])[:half]
    second = codes[half : 2 * half]
    permuted = np.stack([second[np.argsort(keys[:, d], kind="stable"), d] for d in range(codes.shape[1])], 1)
    with torch.no_grad():
        odds = np64(
            objective.discriminator(
                torch.as_tensor(np.concatenate([codes[:half], permuted]), dtype=torch.float32)
            )
        )
    labels = [0] * half + [1] * half
    expected = np.mean([logsumexp(list(o)) - o[label] for o, label in zip(odds, labels)])
    assert loss == pytest.approx(expected, rel=RTOL)


def test_wae_gan_adversary_loss_by_hand():
    config, objective, noise, aux, loss = _own_loss_check("wae_gan")
    with torch.no_grad():
        prior_logits = np64(objective.adversary(config.prior_std * noise["prior"]))
        code_logits = np64(objective.adversary(aux["_codes"]))
    assert loss == pytest.approx(np.mean(softplus(-prior_logits)) + np.mean(softplus(code_logits)), rel=RTOL)


def test_mmd_of_three_points_in_closed_form():
    """MMD² with the inverse multiquadric kernel, 3 codes at x = 0, 1, 2 on a line and 3 prior
    samples at the origin: k depends on the squared distance only, so the unbiased estimate is
    a sum of k(0), k(1) and k(4) in closed form."""
    from models.objectives import mmd_unbiased

    def k(d2):
        return sum(10 * s / (10 * s + d2) for s in (0.1, 0.2, 0.5, 1, 2, 5, 10))

    z = torch.tensor([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]], dtype=torch.float64)
    prior = torch.zeros(3, 2, dtype=torch.float64)
    zz = 2 * (k(1) + k(4) + k(1)) / 6  # ordered pairs i ≠ j
    pp = k(0)
    zp = 3 * (k(0) + k(1) + k(4)) / 9
    expected = zz + pp - 2 * zp
    assert expected > 0.5
    assert float(mmd_unbiased(z, prior)) == pytest.approx(expected, rel=1e-12)


def test_the_weighted_term_reported_is_the_one_in_the_loss():
    """The reported terms agree with the independent ones, so the history shows what was trained."""
    checks = {
        "beta_tcvae": ["mutual_information", "total_correlation", "dimension_wise_kl"],
        "factor_vae": ["total_correlation"],
        "wae_mmd": ["mmd"],
    }
    for name, keys in checks.items():
        config, model, objective, noise, x, schedule, terms, route = run(name)
        expected = route(config, model, objective, noise, x, schedule)
        for key in keys:
            assert float(terms[key]) == pytest.approx(expected[key], rel=RTOL, abs=1e-6), (name, key)


def test_config_fields_named_in_the_cases_exist():
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    for name, (settings, _, _, weights, _) in CASES.items():
        assert set(settings) <= fields and set(weights) - {"kl_weight"} <= fields, name
