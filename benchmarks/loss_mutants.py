"""Mutation check of the loss tests: apply one mutant at a time to the loss code (a sign flipped, a
weight moved to another term, a term dropped) in a temporary copy of the repository, run the loss
value tests against it, and count the mutants they kill.

    python benchmarks/loss_mutants.py          # every mutant, tests/models/test_objective_losses_by_value.py
    python benchmarks/loss_mutants.py --tests tests/models/test_objective_losses_by_value.py \
        tests/models/test_vae_training_and_evaluation.py
    python benchmarks/loss_mutants.py --list

Each mutant is a literal text replacement in one file. If the text is not found (the code moved or
changed), the mutant is reported as "stale" and counted apart: update its text here. Exit status 0
when every applicable mutant is killed, 1 otherwise. About 10 s per mutant on one core.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OBJ, W, C, L = "models/objectives.py", "models/wae_gan.py", "models/cascade_vae.py", "models/lie_group_vae.py"
DIP = "models/dip_vae.py"

# (label, file, text, replacement)
MUTANTS = [
    # shared mathematics
    (
        "gaussian KL: sign of log-variance flipped",
        OBJ,
        "0.5 * (mean.pow(2) + logvar.exp() - logvar - 1.0)",
        "0.5 * (mean.pow(2) + logvar.exp() + logvar - 1.0)",
    ),
    (
        "Bernoulli NLL averaged over pixels, not summed",
        OBJ,
        'reduction="sum") / x.shape[0]',
        'reduction="mean")',
    ),
    (
        "squared error of the logits, not of the pixels",
        OBJ,
        "(torch.sigmoid(logits) - x).pow(2)",
        "(logits - x).pow(2)",
    ),
    # β-VAE
    (
        "β-VAE: KL sign flipped",
        OBJ,
        "loss = reconstruction + beta * kl_weight * kl",
        "loss = reconstruction - beta * kl_weight * kl",
    ),
    (
        "β-VAE: β dropped",
        OBJ,
        "loss = reconstruction + beta * kl_weight * kl",
        "loss = reconstruction + kl_weight * kl",
    ),
    (
        "β-VAE: warm-up weight dropped",
        OBJ,
        "loss = reconstruction + beta * kl_weight * kl",
        "loss = reconstruction + beta * kl",
    ),
    (
        "β-VAE: β moved to the reconstruction",
        OBJ,
        "loss = reconstruction + beta * kl_weight * kl",
        "loss = beta * reconstruction + kl_weight * kl",
    ),
    (
        "VAE: uses the config's β",
        OBJ,
        'self.hyperparameter("beta", 1.0 if config.objective == "vae" else config.beta)',
        'self.hyperparameter("beta", config.beta)',
    ),
    # annealed capacity
    (
        "annealed: |KL − C| without the absolute value",
        OBJ,
        "loss = reconstruction + gamma * (kl - capacity).abs()",
        "loss = reconstruction + gamma * (kl - capacity)",
    ),
    (
        "annealed: γ dropped",
        OBJ,
        "loss = reconstruction + gamma * (kl - capacity).abs()",
        "loss = reconstruction + (kl - capacity).abs()",
    ),
    (
        "annealed: capacity dropped",
        OBJ,
        "loss = reconstruction + gamma * (kl - capacity).abs()",
        "loss = reconstruction + gamma * kl.abs()",
    ),
    # FactorVAE
    (
        "FactorVAE: TC sign flipped",
        OBJ,
        'terms["loss"] = terms["loss"] + self.gamma * total_correlation',
        'terms["loss"] = terms["loss"] - self.gamma * total_correlation',
    ),
    (
        "FactorVAE: TC is the wrong log-odds",
        OBJ,
        "total_correlation = (odds[:, 0] - odds[:, 1]).mean()",
        "total_correlation = (odds[:, 1] - odds[:, 0]).mean()",
    ),
    (
        "FactorVAE: γ moved to the KL",
        OBJ,
        "terms = beta_vae(logits, x, mean, logvar, beta=1.0, kl_weight=schedule.kl_weight,\n"
        "                         likelihood=self.likelihood)\n        odds",
        "terms = beta_vae(logits, x, mean, logvar, beta=self.gamma, kl_weight=schedule.kl_weight,\n"
        "                         likelihood=self.likelihood)\n        odds",
    ),
    (
        "FactorVAE: TC term dropped",
        OBJ,
        'terms["loss"] = terms["loss"] + self.gamma * total_correlation',
        'terms["loss"] = terms["loss"]',
    ),
    (
        "FactorVAE discriminator: labels swapped",
        OBJ,
        "labels = torch.cat([torch.zeros(half, dtype=torch.long, device=odds.device),\n"
        "                            torch.ones(half, dtype=torch.long, device=odds.device)])",
        "labels = torch.cat([torch.ones(half, dtype=torch.long, device=odds.device),\n"
        "                            torch.zeros(half, dtype=torch.long, device=odds.device)])",
    ),
    (
        "FactorVAE discriminator: marginals not permuted",
        OBJ,
        "joint, marginals = codes[:half], permute_dims(codes[half:2 * half], keys)",
        "joint, marginals = codes[:half], codes[half:2 * half]",
    ),
    # β-TCVAE
    ("β-TCVAE: TC sign flipped", OBJ, "(mi + self.beta * tc + dwkl)", "(mi - self.beta * tc + dwkl)"),
    ("β-TCVAE: β moved from TC to MI", OBJ, "(mi + self.beta * tc + dwkl)", "(self.beta * mi + tc + dwkl)"),
    ("β-TCVAE: dimension-wise KL dropped", OBJ, "(mi + self.beta * tc + dwkl)", "(mi + self.beta * tc)"),
    ("β-TCVAE: MI dropped", OBJ, "(mi + self.beta * tc + dwkl)", "(self.beta * tc + dwkl)"),
    (
        "β-TCVAE: warm-up weight dropped",
        OBJ,
        "loss = reconstruction + schedule.kl_weight * (mi + self.beta * tc + dwkl)",
        "loss = reconstruction + (mi + self.beta * tc + dwkl)",
    ),
    (
        "β-TCVAE: dataset size left out of the normaliser",
        OBJ,
        "log_norm = math.log(batch * dataset_size)",
        "log_norm = math.log(batch)",
    ),
    (
        "β-TCVAE: TC and MI swapped",
        OBJ,
        "mutual_information = (log_qz_given_x - log_qz).mean()\n"
        "    total_correlation = (log_qz - log_prod_qz).mean()",
        "mutual_information = (log_qz - log_prod_qz).mean()\n"
        "    total_correlation = (log_qz_given_x - log_qz).mean()",
    ),
    # WAE-MMD
    (
        "MMD: cross term sign flipped",
        OBJ,
        "return k_zz + k_pp - 2.0 * k_zp",
        "return k_zz + k_pp + 2.0 * k_zp",
    ),
    (
        "MMD: biased (diagonal kept)",
        OBJ,
        "k_zz = (inverse_multiquadric(z, z, **kernel) * off_diagonal).sum() / (n * (n - 1))",
        "k_zz = inverse_multiquadric(z, z, **kernel).mean()",
    ),
    ("MMD: prior term dropped", OBJ, "return k_zz + k_pp - 2.0 * k_zp", "return k_zz - 2.0 * k_zp"),
    (
        "WAE-MMD: λ1 and λ2 swapped",
        OBJ,
        "loss = reconstruction + self.mmd_weight * mmd + self.logvar_l1_weight * logvar_l1",
        "loss = reconstruction + self.logvar_l1_weight * mmd + self.mmd_weight * logvar_l1",
    ),
    (
        "WAE-MMD: log-variance L1 dropped",
        OBJ,
        "loss = reconstruction + self.mmd_weight * mmd + self.logvar_l1_weight * logvar_l1",
        "loss = reconstruction + self.mmd_weight * mmd",
    ),
    (
        "WAE-MMD: MMD sign flipped",
        OBJ,
        "loss = reconstruction + self.mmd_weight * mmd + self.logvar_l1_weight * logvar_l1",
        "loss = reconstruction - self.mmd_weight * mmd + self.logvar_l1_weight * logvar_l1",
    ),
    # Ada-GVAE
    (
        "Ada-GVAE: shares the dimensions above the threshold",
        OBJ,
        "shared = delta < threshold",
        "shared = delta > threshold",
    ),
    (
        "Ada-GVAE: averages the log-variances",
        OBJ,
        "shared_logvar = torch.log(0.5 * (logvar1.exp() + logvar2.exp()))",
        "shared_logvar = 0.5 * (logvar1 + logvar2)",
    ),
    (
        "Ada-GVAE: symmetric KL made one-sided",
        OBJ,
        "delta = 0.5 * (forward + gaussian_kl_between(mean2, logvar2, mean1, logvar1))",
        "delta = forward",
    ),
    (
        "Ada-GVAE: threshold at the minimum",
        OBJ,
        "threshold = 0.5 * (delta.amax(1, keepdim=True) + delta.amin(1, keepdim=True))",
        "threshold = delta.amin(1, keepdim=True) + 1e-3",
    ),
    (
        "Ada-GVAE: β dropped",
        OBJ,
        "terms = beta_vae(logits, x, mean, logvar, beta=self.beta, kl_weight=schedule.kl_weight,\n"
        '                         likelihood=self.likelihood)\n        terms["shared_dimensions"]',
        "terms = beta_vae(logits, x, mean, logvar, beta=1.0, kl_weight=schedule.kl_weight,\n"
        '                         likelihood=self.likelihood)\n        terms["shared_dimensions"]',
    ),
    # WAE-GAN
    (
        "WAE-GAN: penalty −log(1 − D) instead of −log D",
        W,
        "return F.softplus(-code_logits).mean()",
        "return F.softplus(code_logits).mean()",
    ),
    (
        "WAE-GAN: penalty sign flipped",
        W,
        "loss = reconstruction + self.adversarial_weight * penalty",
        "loss = reconstruction - self.adversarial_weight * penalty",
    ),
    (
        "WAE-GAN: λ and λ2 swapped",
        W,
        "loss = reconstruction + self.adversarial_weight * penalty + self.logvar_l1_weight * logvar_l1",
        "loss = reconstruction + self.logvar_l1_weight * penalty + self.adversarial_weight * logvar_l1",
    ),
    (
        "WAE-GAN adversary: sides swapped",
        W,
        "return F.softplus(-prior_logits).mean() + F.softplus(code_logits).mean()",
        "return F.softplus(prior_logits).mean() + F.softplus(-code_logits).mean()",
    ),
    (
        "WAE-GAN adversary: prior scale ignored",
        W,
        'prior = self.prior_std * noise["prior"].to(codes.dtype)',
        'prior = noise["prior"].to(codes.dtype)',
    ),
    # CascadeVAE
    (
        "Cascade: β_low and β_high swapped",
        C,
        "cascade_betas(released, self.beta_low, self.beta_high)",
        "cascade_betas(released, self.beta_high, self.beta_low)",
    ),
    (
        "Cascade: release one period early",
        C,
        "return step >= (torch.arange(dims) + 1) * cascade_steps",
        "return step >= torch.arange(dims) * cascade_steps",
    ),
    (
        "Cascade: warm-up weight dropped",
        C,
        '"loss": reconstruction + schedule.kl_weight * weighted_kl',
        '"loss": reconstruction + weighted_kl',
    ),
    (
        "Cascade: KL summed over the batch",
        C,
        "kl_per_dimension = gaussian_kl(mean, logvar).mean(0)",
        "kl_per_dimension = gaussian_kl(mean, logvar).sum(0)",
    ),
    (
        "Cascade: duplicate penalty dropped from the matching",
        C,
        "slot_cost = duplicate_penalty * np.arange(rows)",
        "slot_cost = 0.0 * np.arange(rows)",
    ),
    # DIP-VAE-I
    (
        "DIP-VAE: penalty sign flipped",
        DIP,
        'terms["loss"] = terms["loss"] + penalty',
        'terms["loss"] = terms["loss"] - penalty',
    ),
    (
        "DIP-VAE: λ_d = λ_od (the factor 10 dropped)",
        DIP,
        'self.hyperparameter("lambda_diagonal", 10 * config.resolved_gamma)',
        'self.hyperparameter("lambda_diagonal", config.resolved_gamma)',
    ),
    (
        "DIP-VAE: off-diagonal term keeps the diagonal",
        DIP,
        "return covariance.pow(2).sum() - diagonal.pow(2).sum(), (diagonal - 1).pow(2).sum()",
        "return covariance.pow(2).sum(), (diagonal - 1).pow(2).sum()",
    ),
    (
        "DIP-VAE: unbiased covariance (1/(B − 1))",
        DIP,
        "covariance = centred.T @ centred / mean.shape[0]",
        "covariance = centred.T @ centred / (mean.shape[0] - 1)",
    ),
    # LieGroupVAE
    (
        "Lie: Hessian and commutator weights swapped",
        L,
        "+ self.hessian_weight * hessian + self.commutator_weight * commutator",
        "+ self.commutator_weight * hessian + self.hessian_weight * commutator",
    ),
    (
        "Lie: β dropped",
        L,
        "loss = (reconstruction + self.beta * schedule.kl_weight * kl",
        "loss = (reconstruction + schedule.kl_weight * kl",
    ),
    (
        "Lie: group reconstruction sign flipped",
        L,
        "+ self.group_reconstruction_weight * group_reconstruction",
        "- self.group_reconstruction_weight * group_reconstruction",
    ),
    (
        "Lie: commutator is A_iA_j − (A_iA_j)ᵀ (the authors' code)",
        L,
        "return (products - products.transpose(0, 1)).pow(2).sum((2, 3)).mean()",
        "return (products - products.transpose(2, 3)).pow(2).sum((2, 3)).mean()",
    ),
    (
        "Lie: the decoder reads the wrong group",
        L,
        'read_encoder = noise["group_choice"] < self.encoder_group_probability',
        'read_encoder = noise["group_choice"] > self.encoder_group_probability',
    ),
    (
        "Lie: Hessian penalty keeps the diagonal",
        L,
        "return products * off_diagonal[:, :, None, None]",
        "return products",
    ),
]


def copy_tree(destination: str) -> None:
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    for name in files:
        source = os.path.join(ROOT, name)
        if os.path.isfile(source):
            os.makedirs(os.path.dirname(os.path.join(destination, name)) or destination, exist_ok=True)
            shutil.copy2(source, os.path.join(destination, name))


def run_tests(folder: str, tests: list[str]) -> bool:
    """True when the tests pass (the mutant survives)."""
    env = {**os.environ, "PYTHONPATH": folder}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    return result.returncode == 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", nargs="+", default=["tests/models/test_objective_losses_by_value.py"])
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--only", help="run the mutants whose label contains this text")
    args = parser.parse_args(argv)
    mutants = [m for m in MUTANTS if not args.only or args.only.lower() in m[0].lower()]
    if args.list:
        for label, path, *_ in mutants:
            print(f"{path}: {label}")
        return 0
    killed, survived, stale = [], [], []
    with tempfile.TemporaryDirectory() as folder:
        copy_tree(folder)
        if not run_tests(folder, args.tests):
            print("the tests fail on the unmutated code; fix them first", file=sys.stderr)
            return 2
        for label, path, text, replacement in mutants:
            target = os.path.join(folder, path)
            with open(target) as f:
                original = f.read()
            if text not in original:
                stale.append(label)
                print(f"STALE    {label} ({path}: text not found)", flush=True)
                continue
            with open(target, "w") as f:
                f.write(original.replace(text, replacement, 1))
            try:
                survives = run_tests(folder, args.tests)
            finally:
                with open(target, "w") as f:
                    f.write(original)
            (survived if survives else killed).append(label)
            print(f"{'SURVIVED' if survives else 'killed  '} {label}", flush=True)
    applicable = len(killed) + len(survived)
    print(f"\n{len(killed)} of {applicable} mutants killed; {len(survived)} survived; {len(stale)} stale")
    return 0 if not survived else 1


if __name__ == "__main__":
    sys.exit(main())
