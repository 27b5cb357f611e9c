"""Study presets as data: the fixed settings, the grid axes, and the settings of each scale: ``tiny`` for CI
(seconds), ``smoke`` a laptop's minutes, ``demo`` a verdict on each paper's headline finding (the three in
under an hour on 2 cores; docs/presets.md), ``small`` one GPU (hours), ``full`` the paper. Every value of
``fixed``, ``axes`` and the ``full`` scales carries its source in a comment (the paper's section, its public
code, or "disgen" where neither fixes it); the smaller scales are disgen's."""

from __future__ import annotations

SCALES = ("tiny", "smoke", "demo", "small", "full")

# Montero et al. 2021's models: the VAEs and the ground-truth decoder, which every scale from smoke
# up runs, and the composition task, which needs the whole grid (small and full scales only).
# Sources: M21 §3 and appendix A (models, β, γ, batch 128 for FactorVAE); the FactorVAE runs use
# the kim network on both datasets (M21's FactorVAE scripts; appendix A); the discriminator is
# Kim & Mnih's 6 hidden layers of 1,000 (7 linear layers; disentanglement_lib's fc_discriminator).
FACTOR_VAE_M21 = {"objective": "factor_vae", "batch_size": 128, "architecture": "kim",
                  "discriminator_layers": 7, "discriminator_width": 1000}
M21_MODELS = [
    {"objective": "vae", "beta": 1.0},  # M21 §3
    {"objective": "beta_vae", "beta": 8.0},  # M21 §3: β ∈ {8, 12} on the held-out splits
    {"objective": "beta_vae", "beta": 12.0},
    {**FACTOR_VAE_M21, "gamma": 20.0},  # M21 §3: γ ∈ {20, 50, 100}
    {**FACTOR_VAE_M21, "gamma": 50.0},
    {**FACTOR_VAE_M21, "gamma": 100.0},
    # M21 appendix A: an MLP decoder of the true factor values; as long as the VAEs below full scale;
    # at every scale the lr of the authors' code, which M21's text does not replace (M21_GT_DECODER_PAPER)
    {"task": "ground_truth_decoder", "objective": "vae", "beta": 1.0, "architecture": "higgins", "lr": 1e-3},
]
# The ground-truth decoder's budget, in epochs as M21's code counts them: its decoder's epoch is 10
# iterations, not a pass over the data (mmrl/disent-and-gen scripts/experiments/decoders.py line 161,
# pytorch-ignite's `trainer.run(training_dataloader, max_epochs=epochs, epoch_length=10)`; the same
# line in mmrl/lost-in-latent-space, line 169), at batch 64.
# At full scale: the 1,000 epochs of M21 appendix A's text, counted so: 10,000 steps, at the lr of
# the authors' code (appendix A gives none for the decoder; mmrl/disent-and-gen
# scripts/configs/training.py `generation()` line 128, lr 0.001; mmrl/lost-in-latent-space line 151).
M21_GT_DECODER_PAPER = {**M21_MODELS[-1], "epochs": 1000, "epoch_length": 10, "batch_size": 64}
# M21's code: 500 epochs at lr 1e-3, batch 64 (scripts/configs/training.py `generation()`): 5,000
# steps; for a grid file that wants it.
M21_GT_DECODER_CODE = {**M21_MODELS[-1], "epochs": 500, "epoch_length": 10, "batch_size": 64, "lr": 1e-3}
M21_COMPOSITION = {"task": "composition", "objective": "vae", "beta": 1.0,  # M21 §2.3: β = 1
                   "latent_op": "linear"}  # M21 §2.3: h = W_r[z_r; a] + W_t[z_t; a]
M21_MODELS_FULL = [*M21_MODELS[:-1], M21_GT_DECODER_PAPER, M21_COMPOSITION]
# M21's splits, one of each condition type per dataset (M21 §2.1; the split names are M21's code's);
# burgess_v2 is what the M21 scripts ran on dSprites, kim on 3DShapes.
M21_HELD_OUT = [
    {"dataset": "dsprites", "split": "blank_side", "architecture": "burgess_v2"},
    {"dataset": "dsprites", "split": "shape2tx", "architecture": "burgess_v2"},
    {"dataset": "dsprites", "split": "leave1out", "architecture": "burgess_v2"},
    {"dataset": "shapes3d", "split": "fhue_gt50", "architecture": "kim"},
    {"dataset": "shapes3d", "split": "shape2ohue", "architecture": "kim"},
    {"dataset": "shapes3d", "split": "leave1out", "architecture": "kim"},
]
# M21 §3: 100 epochs on dSprites, 65 on 3DShapes (set with the split, so that the ground-truth
# decoder's 1,000 epochs, a later variant, win)
M21_HELD_OUT_FULL = [{**v, "epochs": 100 if v["dataset"] == "dsprites" else 65} for v in M21_HELD_OUT]

# Montero et al. 2022's models as its code ran them (mmrl/lost-in-latent-space; docs/presets.md has
# each value's file and line). M22's README: plain VAEs and β-VAEs were not used; its results are
# CompositionNets (scripts/bin/run-composition.sh, run-spriteworld.sh), CascadeVAE and LieGroupVAE
# (scripts/bin/run-alts.sh).
M22_CONDITIONS = [  # the conditions M22's composition runs train on
    {"dataset": "dsprites", "split": "shape2tx"},  # M22's sqr2tx
    {"dataset": "shapes3d", "split": "shape2ohue"},
    {"dataset": "shapes3d", "split": "fhue2whue"},
    # MPI3D real (M22's analyse_models.sh and run-composition.sh read the real set): four shapes at
    # one horizontal-axis position (run-composition.sh lines 402-471): cyl2vx (a failure) and bkg2cyl
    # (a success). With --data-source real the trials read mpi3d_real.npz; procedurally, disgen's
    # MPI3D stand-in (the same factor grid)
    {"dataset": "mpi3d_real", "split": "cyl2vx+four_shapes+fix_hx"},
    {"dataset": "mpi3d_real", "split": "bkg2cyl+four_shapes+fix_hx"},
    {"dataset": "circles", "split": "shape2px"},
    {"dataset": "circles", "split": "midpos"},
    {"dataset": "simple", "split": "shape2px"},
    {"dataset": "simple", "split": "midpos"},
]
# M22's two interpolation ops: InterpComp ('interp') and FixedInterpComp ('fixint')
M22_OPS = ("interpolation", "fixed_interpolation")
# every CompositionNet of M22's code reconstructs reference, transform and target (TripletDataset)
M22_COMPOSITION = {"task": "composition", "composition_loss": "all_three", "latent_dim": 10}
# training.py vae(): the β-VAE loss at its default β = 1, Bernoulli (bce)
M22_VAE_LOSS = {"objective": "vae", "beta": 1.0}
# training.py waemmd(): λ1 10, λ2 1e-3, prior 2·N(0, I), squared error. The MMD is disgen's correct
# estimate; mmd_estimator "m22_code" reproduces the code's near-zero term (docs/models.md)
M22_WAE_LOSS = {"objective": "wae_mmd", "mmd_weight": 10.0, "logvar_l1_weight": 1e-3, "prior_std": 2.0}


def m22_composition_nets(dataset: str, split: str) -> list[dict]:
    """The CompositionNets M22's scripts train on one condition (docs/presets.md, "montero2022")."""
    if dataset in ("circles", "simple"):
        # run-spriteworld.sh: kim encoder, spatial broadcast decoder, fixint, batch 16, 100 epochs;
        # lr 3e-4 on Circles, 1e-4 on Simple
        return [{**M22_COMPOSITION, **M22_VAE_LOSS, "architecture": "kim", "decoder": "sbd3",
                 "latent_op": "fixed_interpolation", "batch_size": 16, "epochs": 100,
                 "lr": 3e-4 if dataset == "circles" else 1e-4}]
    # dSprites and 3DShapes: abdi, lr 1e-4, 100 epochs, VAE and WAE losses; MPI3D: montero, the VAE
    # loss 50 epochs on cyl2vx and 100 on bkg2cyl, WAE-MMD 200 epochs at batch 64
    mpi3d = dataset.startswith("mpi3d")
    network = {"architecture": "montero" if mpi3d else "abdi", "lr": 1e-4, "batch_size": 64}
    vae_epochs = (50 if split.startswith("cyl2vx") else 100) if mpi3d else 100
    wae_epochs = 200 if mpi3d else 100
    return [{**M22_COMPOSITION, **loss, **network, "latent_op": op, "epochs": epochs}
            for loss, epochs in ((M22_VAE_LOSS, vae_epochs), (M22_WAE_LOSS, wae_epochs)) for op in M22_OPS]


def m22_cascade_vae(dataset: str) -> dict:
    """CascadeVAE as run-alts.sh ran it (configs/vaes.py and configs/training.py cascade()): kim's encoder
    layout, 6 continuous latents, 3 categories (4 on 3DShapes and MPI3D), λ 1e-3, the discrete code held at
    zero for 80,000 steps, β 10 → 2 one dimension every 20,000 steps, lr 3e-4; 40 epochs on dSprites, 60 on
    3DShapes and MPI3D."""
    return {"objective": "cascade_vae", "architecture": "kim", "latent_dim": 6,
            "discrete_categories": 3 if dataset == "dsprites" else 4, "duplicate_penalty": 1e-3,
            "discrete_warmup_steps": 80_000, "beta_low": 2.0, "beta_high": 10.0, "cascade_steps": 20_000,
            "lr": 3e-4, "batch_size": 64, "epochs": 40 if dataset == "dsprites" else 60}


def m22_lie_group_vae(dataset: str) -> dict:
    """LieGroupVAE as run-alts.sh ran it (configs/training.py lievae()): kim's encoder layout, batch 256, lr
    1e-4, 100 epochs; one 10×10 group on dSprites, 20×20 with the Hessian weight 20 on 3DShapes."""
    group = {"lie_matrix_size": 10, "hessian_weight": 40.0} if dataset == "dsprites" else {
        "lie_matrix_size": 20, "hessian_weight": 20.0}
    return {"objective": "lie_group_vae", "architecture": "kim", "batch_size": 256, "lr": 1e-4, "epochs": 100,
            **group}


def m22_runs() -> list[dict]:
    """Every (condition, model) M22's scripts ran: the composition runs on every condition, CascadeVAE on
    dSprites, 3DShapes and MPI3D, LieGroupVAE on dSprites and 3DShapes."""
    runs = []
    for condition in M22_CONDITIONS:
        dataset = condition["dataset"]
        models = m22_composition_nets(dataset, condition["split"])
        if dataset in ("dsprites", "shapes3d", "mpi3d_real"):
            models.append(m22_cascade_vae(dataset))
        if dataset in ("dsprites", "shapes3d"):
            models.append(m22_lie_group_vae(dataset))
        runs += [{**condition, **model} for model in models]
    return runs


M22_RUNS = m22_runs()


def m22_shrunk(run: dict, **settings) -> dict:
    """A run of ``M22_RUNS`` with ``settings`` replaced: ``steps`` for M22's epochs, below full scale."""
    return {**run, "epochs": None, **settings}


# the demo: M22's Circles CompositionNet (its op, decoder, loss, lr and batch) for 100 steps, 3 seeds
# a split (the findings read a split's mean over at least 3 models)
M22_DEMO_RUNS = [m22_shrunk(run, steps=100) for run in M22_RUNS if run["dataset"] == "circles"]

# The montero presets' metrics: every metric computed by default (analysis.metrics.registry), and the
# rendering judge (opt-in: it renders the grid's candidates), which their reconstruction findings read
MONTERO_METRICS = ["d_score", "dci", "mig", "sap", "modularity_explicitness", "beta_vae", "factor_vae",
                   "transfer", "encoder_decoder", "rendering_judge"]


PRESETS: dict[str, dict] = {
    "default": {
        "description": (
            "β-VAE (burgess) on procedural dSprites, β ∈ {1, 4} × held-out conditions "
            "{leave1out (recombination-to-element), blank_side (extrapolation)}"
        ),
        "fixed": {
            "dataset": "dsprites",
            "architecture": "burgess",
            "objective": "beta_vae",
            "latent_dim": 10,
            "batch_size": 64,
            "kl_warmup_steps": 0,
            "data_seed": 0,
            # D21's transfer scores are for the dittadi2021 preset; BetaVAE/FactorVAE scores are
            # undefined on a random subset of the grid.
            "metrics": ["dci", "d_score", "mig", "sap", "modularity_explicitness", "encoder_decoder"],
        },
        "axes": {"beta": [1.0, 4.0], "split": ["leave1out", "blank_side"]},
        # With --search optuna: β is sampled instead of taken from the axis.
        "search": {"metric": "test_nll", "mode": "min", "space": {"beta": {"loguniform": [0.25, 16.0]}}},
        "scales": {
            # n_images: grid points rendered (None = the whole 737,280-image grid);
            # n_nll / n_metric: evaluation sample budgets (see analysis.evaluate).
            # tiny runs in CI: hist_gbt, the faster stand-in for gbt (40-class orientation makes
            # gbt grow 4,000 trees for that factor alone; ~3x the time on 300 codes)
            "tiny": {"n_images": 3000, "steps": 20, "lr": 1e-3, "batch_size": 32,
                     "report_every": 5, "n_nll": 200, "n_metric": 300, "dci_estimator": "hist_gbt"},
            "smoke": {"n_images": 20000, "steps": 400, "lr": 1e-3,
                      "report_every": 25, "n_nll": 1000, "n_metric": 600},
            "small": {"n_images": None, "steps": 30000, "lr": 5e-4,
                      "report_every": 250, "n_nll": 5000, "n_metric": 10000},
            # M21: Adam lr 1e-4, batch 64, 100 epochs of the (train part of the) full grid.
            "full": {"n_images": None, "steps": 1_100_000, "lr": 1e-4,
                     "report_every": 1000, "n_nll": 10000, "n_metric": 10000},
        },
    },
    "montero2021": {
        "description": (
            "Montero et al. 2021: VAE, β-VAE (β 8, 12), FactorVAE (γ 20, 50, 100) and the "
            "ground-truth decoder on dSprites and 3DShapes, each under an extrapolation, a "
            "recombination-to-range and a recombination-to-element split, and the composition task "
            "with β = 1 (small and full scales: it needs the whole grid); 3 seeds at full scale"
        ),
        # M21 §3 / appendix A: latent size 10, Adam lr 1e-4 (the text also says 5e-4 once), batch 64;
        # no KL warm-up (none is described); data_seed: disgen's (the image subset at small scales)
        "fixed": {"latent_dim": 10, "lr": 1e-4, "batch_size": 64, "data_seed": 0,
                  "kl_warmup_steps": 0,
                  # every metric computed by default, and the rendering judge, which the
                  # reconstruction findings read (docs/analysis.md, "Findings")
                  "metrics": MONTERO_METRICS},
        # held_out comes first: a later variant's settings win, so the ground-truth decoder keeps
        # its MLP decoder where the held-out variant names the VAEs' network.
        "axes": {
            "held_out": M21_HELD_OUT,
            "model": [*M21_MODELS, M21_COMPOSITION],
        },
        "scales": {
            "tiny": {"n_images": 2000, "steps": 10, "lr": 1e-3, "report_every": 5, "n_nll": 100,
                     "n_metric": 200, "dci_estimator": "none",
                     "axes": {"held_out": [{"dataset": "dsprites", "split": "leave1out",
                                            "architecture": "burgess_v2"},
                                           {"dataset": "shapes3d", "split": "fhue_gt50",
                                            "architecture": "kim"}],
                              "model": [{"objective": "vae", "beta": 1.0},
                                        {"objective": "factor_vae", "gamma": 20.0, "batch_size": 32},
                                        {"task": "ground_truth_decoder", "objective": "vae",
                                         "architecture": "higgins"}]}},
            # smoke draws 20,000 grid points: too sparse for composition triplets (small, full)
            "smoke": {"n_images": 20000, "steps": 500, "lr": 1e-3, "report_every": 25,
                      "n_nll": 1000, "n_metric": 600,
                      "axes": {"model": M21_MODELS}},
            # M21's ground-truth decoder, which has no representation to learn, as M21's code ran it
            # (500 of its 10-step epochs at lr 1e-3), on the whole training part of dSprites' grid,
            # under an extrapolation and a recombination-to-range split (where M21 says it fails)
            # and the recombination-to-element control leave1out (where M21 says models succeed),
            # 3 seeds, the fewest a split's interval is read from (docs/presets.md: the end-to-end
            # models need far longer to learn shape and orientation than a laptop has)
            # (the in-distribution NLL is in every row; the rendering judge is in the preset's metrics)
            "demo": {"n_images": None, "report_every": 250, "n_nll": 1000, "n_metric": 1000, "seeds": 3,
                     "axes": {"held_out": M21_HELD_OUT[:3], "model": [M21_GT_DECODER_CODE]}},
            "small": {"n_images": None, "steps": 30000, "lr": 5e-4, "report_every": 250,
                      "n_nll": 5000, "n_metric": 10000},
            # The paper: 100 epochs on dSprites, 65 on 3DShapes, Adam lr 1e-4, 3 seeds (M21 reports
            # the seed with the highest disentanglement).
            # the ground-truth decoder: 1,000 epochs of 10 steps (M21 appendix A; M21's code's epoch:
            # M21_GT_DECODER_PAPER)
            "full": {"n_images": None, "report_every": 1000, "n_nll": 10000, "n_metric": 10000, "seeds": 3,
                     "axes": {"held_out": M21_HELD_OUT_FULL, "model": M21_MODELS_FULL}},
        },
    },
    "montero2022": {
        "description": (
            "Montero et al. 2022's models as its code ran them: CompositionNets with M22's latent ops "
            "interpolation and fixed_interpolation, VAE and WAE-MMD losses, all three images "
            "reconstructed (abdi on dSprites and 3DShapes, montero on MPI3D; kim encoder with the sbd3 "
            "spatial broadcast decoder on Circles and Simple), CascadeVAE and LieGroupVAE; on dSprites "
            "shape2tx, 3DShapes shape2ohue and fhue2whue, MPI3D real (mpi3d_real.npz with --data-source "
            "real) cyl2vx+four_shapes+fix_hx and bkg2cyl+four_shapes+fix_hx, Circles and Simple shape2px "
            "and midpos"
        ),
        # M22's code: 10 latents; each run sets its network, lr, batch and epochs (M22_RUNS)
        "fixed": {"latent_dim": 10, "data_seed": 0, "metrics": MONTERO_METRICS},
        "axes": {"run": M22_RUNS},
        "scales": {
            # CI: one CompositionNet with M22's op and decoder on Circles' whole grid (1,024 images)
            "tiny": {"n_images": None, "steps": 6, "report_every": 3, "n_nll": 100, "n_metric": 200,
                     "dci_estimator": "none",
                     "axes": {"run": [m22_shrunk(run, steps=6, batch_size=4) for run in M22_RUNS
                                      if run["split"] == "midpos" and run["dataset"] == "circles"]}},
            # a laptop's minutes: M22's Circles and Simple CompositionNets (whole grids) and its
            # CascadeVAE and LieGroupVAE on 20,000 dSprites images, a few hundred steps
            "smoke": {"n_images": None, "report_every": 25, "n_nll": 1000, "n_metric": 600,
                      "axes": {"run": [m22_shrunk(run, steps=200) for run in M22_RUNS
                                       if run["dataset"] in ("circles", "simple")]
                              + [m22_shrunk(run, steps=300, n_images=20000, cascade_steps=60,
                                            discrete_warmup_steps=120) for run in M22_RUNS
                                 if run["dataset"] == "dsprites" and run.get("task") != "composition"]}},
            # The encoder-versus-decoder diagnosis on Circles with M22's own CompositionNet (kim
            # encoder, sbd3 decoder, fixint op, batch 16, lr 3e-4, all three images reconstructed),
            # shortened, 3 seeds a split. docs/presets.md gives the cost estimate.
            "demo": {"n_images": None, "report_every": 50, "n_nll": 1000, "n_metric": 1000, "seeds": 3,
                     # the in-distribution NLL is in every row; the rendering judge reads both sides
                     "metrics": ["d_score", "encoder_decoder", "rendering_judge"],
                     "axes": {"run": M22_DEMO_RUNS}},
            "small": {"n_images": None, "report_every": 250, "n_nll": 5000, "n_metric": 10000,
                      "axes": {"run": [{**run, "epochs": run["epochs"] / 4} for run in M22_RUNS]}},
            # M22's runs, each at its epochs (M22_RUNS); 3 seeds: chosen by disgen
            "full": {"n_images": None, "report_every": 1000, "n_nll": 10000, "n_metric": 10000, "seeds": 3},
        },
    },
    "dittadi2021": {
        "description": (
            "Dittadi et al. 2021's grid: supervision {unsupervised β-VAE, Ada-GVAE k=1} × β {1, 2, 4} "
            "× KL warm-up {0, 10k, 50k} × latent size {10, 25, 50} × input noise {off, on} = 108 "
            "configurations, 10 seeds at full scale (1,080 models). By default on a 3DShapes stand-in "
            "with 2 of the 10 object hues held out from the encoder (OOD2-A), with the residual "
            "architecture at 64 px; --dataset finger: on D21's own robot-finger sets, prepared under "
            "--data-dir (OOD2-A held-out colours, OOD2-B real images; 128 px)"
        ),
        # D21 §4 and appendix: Adam lr 1e-4, batch 64, the residual network (at 64 px: disgen's
        # adaptation), global gradient-norm clipping; the data is disgen's stand-in for D21's robot
        # scene (3DShapes, 2 of 10 object hues never seen by the encoder: OOD2-A)
        "fixed": {"dataset": "shapes3d", "split": "d21_ood2a", "architecture": "dittadi",
                  "lr": 1e-4, "batch_size": 64, "data_seed": 0,
                  # The paper's clipping value and noise σ did not survive in our copy: our choices.
                  "grad_clip_norm": 1.0,
                  # D21 §5: OOD1 varies the colour, never the factor with the fewest values; here
                  # object hue. D21 reports a GBT and an MLP [256, 256] readout: both.
                  "transfer_factor": "object_hue", "transfer_regressors": ["gbt", "mlp"]},
        "axes": {
            # D21 §4: supervision × β × KL warm-up × latent size × noise = 108 configurations
            "supervision": [{"objective": "beta_vae"},
                            {"objective": "ada_gvae", "pair_factors_changed": 1,
                             "pair_divergence": "symmetric_kl"}],
            "beta": [1.0, 2.0, 4.0],
            "kl_warmup_steps": [0, 10000, 50000],
            "latent_dim": [10, 25, 50],
            # D21 §4: noise off or on, two components; σ 0.03 per subpixel and 0.15 for the greyscale
            # field at 1/16 resolution, upsampled ×16 (GiuliaLanzillotta/CausalAE datasets/utils.py,
            # AdditiveNoise; lost from our copy of D21)
            "input_noise": [{"input_noise_subpixel_std": 0.0, "input_noise_greyscale_std": 0.0},
                            {"input_noise_subpixel_std": 0.03, "input_noise_greyscale_std": 0.15}],
        },
        "scales": {
            "tiny": {"n_images": 2000, "steps": 6, "lr": 1e-3, "batch_size": 8, "architecture": "burgess",
                     "report_every": 3, "n_nll": 50, "n_metric": 100, "dci_estimator": "none",
                     "axes": {"beta": [1.0], "kl_warmup_steps": [0, 4], "latent_dim": [10],
                              "input_noise": [{"input_noise_subpixel_std": 0.03,
                                               "input_noise_greyscale_std": 0.05}]}},
            "smoke": {"n_images": 20000, "steps": 500, "lr": 1e-3, "architecture": "burgess",
                      "report_every": 25, "n_nll": 1000, "n_metric": 600,
                      "axes": {"kl_warmup_steps": [0, 100], "latent_dim": [10]}},
            # D21's headline: DCI against OOD1 transfer error, within each supervision group: 6 models
            # a group (β 1, 2 × 3 seeds; warm-up, latent size and noise fixed), trained long enough
            # to learn the OOD1 factor, object hue; GBT and MLP readouts. The within-group rule needs
            # 12 a group (power 0.77), 43 minutes more than the hour holds beside M21's and M22's
            # controls: at 6 a group its power is 0.35 and the finding says ? with it (docs/presets.md)
            "demo": {"n_images": 20000, "steps": 1000, "lr": 1e-3, "architecture": "burgess",
                     "report_every": 100, "n_nll": 500, "n_metric": 1000, "seeds": 3,
                     "metrics": ["dci", "transfer"], "transfer_regressors": ["gbt", "mlp"],
                     "axes": {"beta": [1.0, 2.0], "kl_warmup_steps": [0], "latent_dim": [10],
                              "input_noise": [{"input_noise_subpixel_std": 0.0,
                                               "input_noise_greyscale_std": 0.0}]}},
            "small": {"n_images": None, "steps": 40000, "lr_milestones": [15000, 30000],
                      "lr_decay": 0.5, "report_every": 250, "n_nll": 5000, "n_metric": 10000},
            # The paper: 400k steps, lr 1e-4 halved at 150k and 300k, batch 64, 10 seeds.
            "full": {"n_images": None, "steps": 400000, "lr_milestones": [150000, 300000],
                     "lr_decay": 0.5, "report_every": 1000, "n_nll": 10000, "n_metric": 10000,
                     "seeds": 10},
        },
        # --dataset finger: D21's own data (docs/datasets.md), prepared under --data-dir; its settings
        # win over the stand-in's at every scale (sweeps.grid.with_dataset)
        "datasets": {"finger": {
            # D21 §2, §5: the encoder trains on all 8 colours of `finger` (the whole set: n_images
            # null); OOD2-A on `finger_heldout_colors`, OOD2-B (sim to real) on `finger_real`; the
            # residual network at 128 px (D21 appendix); OOD1 on the colour. The 2 % of random
            # combinations held out for the test NLL: chosen by disgen (D21 reports none)
            "fixed": {"dataset": "finger", "split": "random_combinations_2", "data_source": "prepared",
                      "n_images": None, "image_size": 128, "transfer_factor": "colour",
                      "ood2_a_dataset": "finger_heldout_colors", "ood2_b_dataset": "finger_real"},
            # tiny: the transfer scores only (GBT), on enough codes for 8 colours
            "scales": {"tiny": {"dci_estimator": "hist_gbt", "metrics": ["transfer"], "n_metric": 300,
                                "transfer_regressors": ["gbt"]}},
        }},
    },
}
