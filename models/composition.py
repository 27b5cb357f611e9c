"""CompositionNet (Montero et al. 2021 §2.3 and appendix A; Montero et al. 2022).

The composition task: given a reference image, a transform image and a one-hot action naming a
factor, produce the reference image with that factor taken from the transform. The network
encodes both images with one VAE encoder, combines the two posterior samples and the action with
a latent operation, and decodes the result.

Latent operations:
- "linear" (M21's choice): h = W_r[z_r; a] + W_t[z_t; a];
- "interpolation" (M22's ``InterpComp``, mmrl/lost-in-latent-space src/models/compnet.py lines
  41-53): h = w·z_r + (1 − w)·z_t, element-wise, with w = sigmoid(W[z_r; z_t; a] + b): the gate
  reads both codes and the action, and w weighs the reference;
- "fixed_interpolation" (M22's ``FixedInterpComp``, the same file lines 5-21, "fixint" in
  scripts/bin/run-composition.sh and run-spriteworld.sh): no parameters; the one-hot action,
  padded with zeros to the latent size, picks the latent dimension taken from the transform:
  h = z_r·(1 − a) + z_t·a (it needs a latent dimension per factor);
- "mlp" (disgen's; M22's ``MLPComp`` cannot run: it concatenates 2B code rows with B actions):
  a 3-layer MLP with 100 hidden units on [z_r; z_t; a].

What the loss reconstructs (``composition_loss``): "target", the composed image only (M21
appendix A's reading), with the KL of both inputs averaged; or "all_three", as M22's code trains
(its triplets' target stacks the reference, the transform and the composed image,
src/dataset/tuples.py ``TripletDataset``; its loss sums the reconstruction over all three and the
KL over both inputs' posteriors per triplet, src/training/loss.py ``AELoss``/``GaussianVAELoss``).
The objective is β-VAE's (reconstruction + β·KL) or WAE-MMD's (reconstruction + λ1·MMD(codes,
prior) + λ2·‖logvar‖₁, M22's ``waemmd`` runs; the MMD as ``mmd_estimator`` says, the codes being
both inputs' posterior samples; with m22_code, each triplet's three codes in one row, as M22's
composition network hands its loss (B, 3, K) codes).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import nn

from models.architectures import ARCHITECTURES, decoder_factory, initialise
from models.config import ModelConfig, NetworkConfig
from models.device import Rows
from models.engine import TaskTrainer
from models.objectives import RECONSTRUCTION, gaussian_kl, mmd_m22_code, mmd_unbiased, posterior_sample


class LinearOp(nn.Module):
    def __init__(self, latent_dim: int, n_actions: int):
        super().__init__()
        self.reference = nn.Linear(latent_dim + n_actions, latent_dim, bias=False)
        self.transform = nn.Linear(latent_dim + n_actions, latent_dim, bias=False)

    def forward(self, z_reference, z_transform, action):
        return (self.reference(torch.cat([z_reference, action], 1))
                + self.transform(torch.cat([z_transform, action], 1)))


class InterpolationOp(nn.Module):
    """M22's InterpComp: h = w·z_r + (1 − w)·z_t, w = sigmoid(W[z_r; z_t; a] + b)."""

    def __init__(self, latent_dim: int, n_actions: int):
        super().__init__()
        self.gate = nn.Linear(2 * latent_dim + n_actions, latent_dim)

    def forward(self, z_reference, z_transform, action):
        w = torch.sigmoid(self.gate(torch.cat([z_reference, z_transform, action], 1)))
        return w * z_reference + (1 - w) * z_transform


class FixedInterpolationOp(nn.Module):
    """M22's FixedInterpComp: h = z_r·(1 − a) + z_t·a, the one-hot action a padded with zeros to the
    latent size, so action k takes latent dimension k from the transform. No parameters."""

    def __init__(self, latent_dim: int, n_actions: int):
        super().__init__()
        if latent_dim < n_actions:
            raise ValueError(f"latent_op 'fixed_interpolation': needs a latent dimension per factor; "
                             f"latent_dim {latent_dim} < {n_actions} factors")
        self.padding = latent_dim - n_actions

    def forward(self, z_reference, z_transform, action):
        a = torch.cat([action, action.new_zeros(len(action), self.padding)], 1)
        return z_reference * (1 - a) + z_transform * a


class MLPOp(nn.Sequential):
    def __init__(self, latent_dim: int, n_actions: int, hidden: int = 100):
        super().__init__(
            nn.Linear(2 * latent_dim + n_actions, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, latent_dim),
        )

    def forward(self, z_reference, z_transform, action):
        return super().forward(torch.cat([z_reference, z_transform, action], 1))


class ComposedAutoencoder(nn.Module):
    """A CompositionNet's encoder and decoder, shared (not copied), with a VAE's ``encode``,
    ``decode`` and ``forward`` (``models.vae.VAE``'s); ``config`` is the network's, as its
    training config with ``task`` "vae"."""

    def __init__(self, net: CompositionNet):
        super().__init__()
        self.encoder, self.decoder, self.network = net.encoder, net.decoder, net.network
        config = getattr(net, "config", None)
        if config is not None:
            self.config = dataclasses.replace(config, task="vae")

    def encode(self, x):
        return self.encoder(x)

    def decode(self, z):
        return self.decoder(z)

    def forward(self, x):
        mean, logvar = self.encode(x)
        z = mean + torch.randn_like(mean) * torch.exp(0.5 * logvar) if self.training else mean
        return self.decode(z), mean, logvar


LATENT_OPS = {"linear": LinearOp, "interpolation": InterpolationOp,
              "fixed_interpolation": FixedInterpolationOp, "mlp": MLPOp}


class CompositionNet(nn.Module):
    """Encoder and decoder of ``network.architecture`` (M21: burgess) around the latent operation
    ``network.latent_op``; ``network`` is a ``NetworkConfig`` (a ``ModelConfig``'s ``network``).
    The weights are initialised from ``seed``; ``beta`` weighs the KL in ``loss_terms``."""

    def __init__(self, network: NetworkConfig, n_actions: int, *, seed: int = 0, beta: float = 1.0,
                 loss=None):
        """``loss``: a ``LossConfig`` (the objective: β-VAE's by default, or WAE-MMD's; and
        ``composition_loss``); None: β-VAE's terms on the target, with ``beta``."""
        super().__init__()
        self.loss_config = loss
        if n_actions < 1:
            raise ValueError(f"n_actions: must be at least 1; got {n_actions}")
        self.network, self.n_actions, self.latent_op, self.beta = network, n_actions, network.latent_op, beta
        encoder, decoder = ARCHITECTURES[network.architecture][0], decoder_factory(network.architecture,
                                                                                   network.decoder)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.encoder = encoder(network.channels, network.latent_dim, network.image_size)
            self.decoder = decoder(network.channels, network.latent_dim, network.image_size)
            self.op = LATENT_OPS[self.latent_op](network.latent_dim, n_actions)
            initialise(self)

    def encode(self, x):
        return self.encoder(x)

    def autoencoder(self) -> ComposedAutoencoder:
        """The encoder and decoder as an autoencoder, sharing these weights: what M22's analysis
        reads from a trained CompositionNet (mmrl/lost-in-latent-space scripts/analysis/model.py
        75-79, ``load_lgm_from_compnet`` in scripts/ingredients/models.py 153-170), so that its
        codes and reconstructions can be scored as a VAE's."""
        return ComposedAutoencoder(self)

    def decode(self, z):
        return self.decoder(z)

    def compose(self, reference, transform, action, generator: torch.Generator | None = None):
        """The codes (both inputs' (2B, K), then the composed (B, K)) and the posteriors (mean,
        logvar) of both inputs. With a ``generator`` the codes are posterior samples; without, the
        means."""
        mean, logvar = self.encoder(torch.cat([reference, transform]))
        z = posterior_sample(mean, logvar, generator) if generator is not None else mean
        z_reference, z_transform = z.chunk(2)
        return z, self.op(z_reference, z_transform, action.float()), mean, logvar

    def forward(self, reference, transform, action, generator: torch.Generator | None = None):
        """Logits of the composed image, and the posteriors (mean, logvar) of both inputs. With a
        ``generator`` the codes are posterior samples; without, the means."""
        _, composed, mean, logvar = self.compose(reference, transform, action, generator)
        return self.decoder(composed), mean, logvar

    def loss_terms(self, reference, transform, action, target, generator: torch.Generator,
                   beta: float | None = None, kl_weight: float = 1.0) -> dict:
        """The loss of one batch of triplets (the module's docstring): with ``composition_loss``
        "target", the target's NLL + kl_weight·β·KL (both inputs' KLs averaged); with "all_three",
        the NLLs of reference, transform and target summed + kl_weight·β·(KL_r + KL_t). Under
        WAE-MMD, the squared error (or the likelihood set) + λ1·MMD + λ2·‖logvar‖₁ in place of
        β·KL (``kl`` is still reported)."""
        loss_config = self.loss_config
        beta = self.beta if beta is None else beta
        z, composed, mean, logvar = self.compose(reference, transform, action, generator)
        likelihood = RECONSTRUCTION["bernoulli" if loss_config is None else loss_config.resolved_likelihood]
        all_three = loss_config is not None and loss_config.composition_loss == "all_three"
        if all_three:
            logits = self.decoder(torch.cat([z, composed]))
            per_image = likelihood(logits, torch.cat([reference, transform, target]))
            reconstruction = per_image.view(3, -1).sum(0).mean()
        else:
            reconstruction = likelihood(self.decoder(composed), target).mean()
        per_input = gaussian_kl(mean, logvar).sum(1)
        kl = per_input.view(2, -1).sum(0).mean() if all_three else per_input.mean()
        terms = {"reconstruction": reconstruction, "kl": kl}
        if loss_config is None or loss_config.objective != "wae_mmd":
            return {"loss": reconstruction + kl_weight * beta * kl, **terms}
        logvar_l1 = logvar.abs().sum(1).view(2, -1).sum(0).mean() if all_three else logvar.abs().sum(1).mean()
        if loss_config.mmd_estimator == "m22_code":
            codes = torch.cat([z.view(2, -1, z.shape[1]).transpose(0, 1).flatten(1), composed], 1)
        else:
            codes = z
        prior = loss_config.prior_std * torch.randn(codes.shape, generator=generator, device=codes.device,
                                                    dtype=codes.dtype)
        mmd = (mmd_m22_code if loss_config.mmd_estimator == "m22_code" else mmd_unbiased)(codes, prior)
        loss = reconstruction + loss_config.mmd_weight * mmd + loss_config.logvar_l1_weight * logvar_l1
        return {"loss": loss, **terms, "mmd": mmd, "logvar_l1": logvar_l1}


def _class_keys(classes: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Mixed-radix code of each row of class tuples (equal tuples, equal codes)."""
    keys = np.zeros(len(classes), np.int64)
    for column, size in enumerate(sizes):
        keys = keys * int(size) + classes[:, column]
    return keys


class TripletSampler:
    """Composition triplets (reference, transform, action, target) over rows of an image array.

    The target is the image whose factor classes are the reference's, except the action's factor,
    which it takes from the transform. :meth:`sample` draws reference and transform uniformly among
    ``pool`` rows and the action uniformly among the factors that vary over the pool (precisely:
    in which two pool images differ while agreeing in every other factor); a triplet
    whose target is not a pool row is drawn again, so no image outside the pool (a held-out image,
    when the pool is a split's training rows) appears in a triplet. It works on the rows' classes
    (any labelled dataset, a full grid or not) and costs O(batch·log N) a call. Where several rows
    share one class tuple, the target is the first of them.
    """

    def __init__(self, classes: np.ndarray, pool: np.ndarray, max_tries: int = 100):
        classes = np.asarray(classes, dtype=np.int64)
        if classes.ndim != 2:
            raise ValueError(f"classes: expected one row of factor classes per image, (N, F); got shape "
                             f"{classes.shape}")
        self.classes, self.pool, self.max_tries = classes, np.asarray(pool, dtype=np.int64), max_tries
        if len(self.pool) == 0:
            raise ValueError("train_indices: the training set is empty")
        self.sizes = classes.max(0) + 1
        if float(np.prod(self.sizes.astype(float))) >= 2.0 ** 62:
            raise ValueError(f"classes: {len(self.sizes)} factors of {self.sizes.tolist()} classes are too "
                             "many combinations to index")
        self.keys = _class_keys(classes, self.sizes)
        pool_keys = self.keys[self.pool]
        order = np.argsort(pool_keys, kind="stable")
        self._sorted_keys, self._sorted_rows = pool_keys[order], self.pool[order]
        self.actions = self._movable_factors()
        if len(self.actions) == 0:
            raise ValueError(
                "composition: no two training images differ in one factor only, so every triplet's target "
                "would be its reference. The composition task needs (most of) a full factor grid: train "
                "on the whole grid (n_images: null)")

    def _movable_factors(self) -> np.ndarray:
        """The factors an action may name: those in which some two distinct pool tuples differ
        and agree in every other factor (on a grid: the factors with more than one class)."""
        _, first = np.unique(self.keys[self.pool], return_index=True)
        distinct = self.classes[self.pool[first]]
        movable = []
        for factor in range(distinct.shape[1]):
            rest = np.delete(np.arange(distinct.shape[1]), factor)
            _, counts = np.unique(_class_keys(distinct[:, rest], self.sizes[rest]), return_counts=True)
            if (counts > 1).any():
                movable.append(factor)
        return np.asarray(movable, dtype=np.int64)

    def row_of(self, classes: np.ndarray) -> np.ndarray:
        """The pool row with each class tuple, or -1 where the pool has none."""
        keys = _class_keys(classes, self.sizes)
        inside = (classes < self.sizes).all(1) & (classes >= 0).all(1)
        position = np.minimum(np.searchsorted(self._sorted_keys, keys), len(self._sorted_keys) - 1)
        found = inside & (self._sorted_keys[position] == keys)
        return np.where(found, self._sorted_rows[position], -1)

    def sample(self, rng: np.random.Generator, n: int):
        """``n`` triplets as row arrays (reference, transform, target) and the action factor of each."""
        out = [np.empty(n, np.int64) for _ in range(4)]
        todo = np.arange(n)
        for _ in range(self.max_tries):
            m = len(todo)
            reference = self.pool[rng.integers(len(self.pool), size=m)]
            transform = self.pool[rng.integers(len(self.pool), size=m)]
            action = self.actions[rng.integers(len(self.actions), size=m)]
            target_classes = self.classes[reference].copy()
            target_classes[np.arange(m), action] = self.classes[transform, action]
            target = self.row_of(target_classes)
            ok = target >= 0
            for array, value in zip(out, (reference, transform, target, action)):
                array[todo[ok]] = value[ok]
            todo = todo[~ok]
            if len(todo) == 0:
                return tuple(out)
        raise ValueError(
            f"composition: could not draw {len(todo)} of {n} triplets in {self.max_tries} tries: changing "
            "one factor of a training image rarely gives another training image. The composition task "
            "needs (most of) a full factor grid: train on the whole grid (n_images: null)")

    def sample_onto(self, targets: np.ndarray, rng: np.random.Generator):
        """Triplets whose targets are the given rows (which may lie outside the pool): the action
        uniformly among the factors that vary, the reference the target with the action's factor
        set to a random pool row's class, the transform a random pool row with the target's class
        in that factor. Reference and transform are pool rows. Returns (reference, transform,
        target, action) for the targets that got a triplet within ``max_tries`` draws (all of
        them on a full grid)."""
        targets = np.asarray(targets, dtype=np.int64)
        reference, transform, served, action = self.sample_onto_classes(self.classes[targets], rng)
        return reference, transform, targets[served], action

    def sample_onto_classes(self, wanted: np.ndarray, rng: np.random.Generator):
        """:meth:`sample_onto` for targets given by their factor classes ``wanted`` (N, F), which
        need not be rows at all (grid points rendered for evaluation): (reference, transform,
        position in ``wanted``, action) for the targets served. Reference and transform are pool
        rows."""
        wanted = np.asarray(wanted, dtype=np.int64).reshape(-1, self.classes.shape[1])
        out = [np.full(len(wanted), -1, np.int64) for _ in range(4)]
        todo = np.arange(len(wanted))
        for _ in range(self.max_tries):
            m = len(todo)
            if m == 0:
                break
            action = self.actions[rng.integers(len(self.actions), size=m)]
            target = wanted[todo]
            reference_classes = target.copy()
            donor = self.pool[rng.integers(len(self.pool), size=m)]
            reference_classes[np.arange(m), action] = self.classes[donor, action]
            transform_classes = self.classes[self.pool[rng.integers(len(self.pool), size=m)]].copy()
            transform_classes[np.arange(m), action] = target[np.arange(m), action]
            reference, transform = self.row_of(reference_classes), self.row_of(transform_classes)
            ok = (reference >= 0) & (transform >= 0)
            for array, value in zip(out, (reference, transform, todo, action)):
                array[todo[ok]] = value[ok]
            todo = todo[~ok]
        drawn = out[0] >= 0
        return tuple(array[drawn] for array in out)


class CompositionTrainer(TaskTrainer):
    """Trains a :class:`CompositionNet` on triplets among the training rows (M21 appendix A).

    Each step draws ``batch_size`` triplets with :class:`TripletSampler` from the training rows
    only (seeded by the checkpointed ``batch_rng``), so no held-out image is a reference,
    transform or target; the posterior samples come from ``noise_rng``. The loss is the target's
    Bernoulli NLL + β·KL (with ``kl_warmup_steps``, the KL weight rises linearly from 0).
    ``classes`` (N, F) are the images' factor classes; ``factor_space``, if given, must have F
    factors (one action per factor). ``Trainer``'s interface (see ``models.engine``).
    """

    def __init__(self, model: CompositionNet, images: np.ndarray, classes: np.ndarray, factor_space,
                 train_indices: np.ndarray, config: ModelConfig, device=None, settings=None):
        super().__init__(model, images, train_indices, config, device, settings)
        classes = np.asarray(classes)
        if classes.ndim != 2 or len(classes) != len(images):
            raise ValueError(f"classes: expected one row of factor classes per image, ({len(images)}, F); "
                             f"got shape {classes.shape}")
        if classes.shape[1] != model.n_actions:
            raise ValueError(f"classes: the network takes {model.n_actions} actions (one per factor); the "
                             f"classes have {classes.shape[1]} factors")
        if factor_space is not None and factor_space.n_factors != classes.shape[1]:
            raise ValueError(f"factor_space: has {factor_space.n_factors} factors; classes have "
                             f"{classes.shape[1]}")
        self.triplets = TripletSampler(classes, self.train_indices)

    def images_per_step(self) -> int:
        """Reference and transform images encoded per step."""
        return 2 * self.optimisation.batch_size

    def rows_per_step(self) -> int:
        """Reference, transform and target rows and the action of each triplet."""
        return 4 * self.optimisation.batch_size

    def draw_rows(self) -> np.ndarray:
        """A batch of training triplets from ``batch_rng``: the reference, transform and target rows,
        then the action (the factor's index) of each, one array."""
        return np.concatenate(self.triplets.sample(self.batch_rng, self.optimisation.batch_size))

    def draw_inputs(self, rows: Rows | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """A batch of training triplets: reference, transform, the action (one-hot) and target."""
        rows = self.rows_ahead(1)[0] if rows is None else rows
        batch_size = self.optimisation.batch_size
        reference, transform, target = self.batch_images(rows[:3 * batch_size]).chunk(3)
        action = rows.on_device[3 * batch_size:]
        one_hot = (action.unsqueeze(1) == torch.arange(self.model.n_actions, device=action.device)).long()
        return reference, transform, one_hot.to(self.device), target

    def loss_terms(self, inputs) -> dict[str, torch.Tensor]:
        """The target's NLL + β·w·KL; the posterior samples come from ``noise_rng``."""
        return self.model.loss_terms(*inputs, self.noise_rng, kl_weight=self.kl_weight())
