"""The rendering judge (analysis.metrics.rendering_judge): it reads the split's rule factors from
ground truth, it catches a decoder that renders the seen shape where the held-out one belongs
(M21's substitution), and ``evaluate`` writes its columns for every task where asked for."""

import json

import numpy as np
import pytest
import torch

from analysis.evaluation import EvaluationConfig, evaluate
from analysis.metrics.rendering_judge import read_right, rendering_judge
from data_pipeline import get_split, load_procedural
from data_pipeline.datasets import factor_space, render_stored


def held_out(dataset, split, n, seed=0):
    space = factor_space(dataset)
    pool = get_split(dataset, split).test_grid_indices(space)
    return space, space.classes_of(np.random.default_rng(seed).choice(pool, min(n, len(pool)), replace=False))


@pytest.mark.parametrize("dataset, split", [("dsprites", "shape2tx"), ("circles", "midpos")])
def test_the_judge_reads_ground_truth(dataset, split):
    space, classes = held_out(dataset, split, 40)
    images = render_stored(dataset, classes)
    result = rendering_judge(space, get_split(dataset, split), lambda c: render_stored(dataset, c), classes,
                             images, images)
    assert result["judge_accuracy_ground_truth"] >= 0.95
    assert result["judge_accuracy_test"] >= 0.95 and result["judge_substitution_share"] == 0.0
    assert result["judge_images"] == len(classes)
    assert set(json.loads(result["rendering_judge"])) == set(get_split(dataset, split).factor_names(space))


def test_a_decoder_that_renders_the_seen_shape_is_read_as_a_substitution():
    """shape2tx holds out squares on the right; a "decoder" that draws an ellipse there (a shape seen
    at that position) is read as the ellipse: every image substituted, none right."""
    split = get_split("dsprites", "shape2tx")
    space, classes = held_out("dsprites", "shape2tx", 40, seed=1)
    seen = classes.copy()
    seen[:, space.position("shape")] = 1  # an ellipse, seen on the right in training
    drawn = render_stored("dsprites", seen).astype(np.float32) / 255
    result = rendering_judge(space, split, lambda c: render_stored("dsprites", c), classes,
                             render_stored("dsprites", classes), drawn)
    assert result["judge_substitution_share"] == 1.0 and result["judge_accuracy_test"] == 0.0
    per_factor = json.loads(result["rendering_judge"])
    assert per_factor["shape"]["substitution"] == 1.0 and per_factor["posX"]["test"] == 1.0
    # a blank image is wrong but no substitution of a seen square-on-the-left either way is forced
    blank = rendering_judge(space, split, lambda c: render_stored("dsprites", c), classes,
                            render_stored("dsprites", classes), np.zeros_like(drawn))
    assert blank["judge_accuracy_test"] < 0.5


def test_a_position_read_one_class_off_is_right_two_off_is_not():
    space = factor_space("circles")
    truth = np.array([[10, 10], [10, 10], [10, 10]])
    read = np.array([[11, 9], [12, 10], [10, 8]])
    right = read_right(space, ("posX", "posY"), truth, read)
    assert right.tolist() == [[True, True], [False, True], [True, False]]


@pytest.mark.slow  # about 3 s: the judge renders Circles' 1,024 templates
def test_evaluate_writes_the_judge_for_a_vae_and_leaves_it_nan_unless_asked():
    import planted

    split = get_split("circles", "midpos")
    data = load_procedural("circles")

    class Render(planted.PlantedModel):
        """A "VAE" whose reconstruction is the ground truth: the judge reads it right."""

        def encode(self, x):
            return x.flatten(1), x.flatten(1)

        def decode(self, z):
            p = z.reshape(-1, 1, 64, 64).clamp(1e-4, 1 - 1e-4)
            return (p / (1 - p)).log()

    model = Render(None, 64 * 64)
    config = EvaluationConfig(n_nll=20, n_metric=10, metrics=("rendering_judge",))
    row = evaluate(model, data, split, config)
    assert row["judge_accuracy_ground_truth"] == 1.0 and row["judge_accuracy_test"] == 1.0
    assert row["judge_accuracy_in_distribution"] == 1.0 and row["judge_substitution_share"] == 0.0
    assert row["judge_images"] == 100  # midpos holds out 10 × 10 positions: all of them, under 200
    default = evaluate(model, data, split, EvaluationConfig(n_nll=20, n_metric=10, metrics=()))
    assert np.isnan(default["judge_accuracy_test"]) and default["judge_images"] is None


class _Shift(torch.nn.Module):
    """A "VAE" of Circles whose reconstruction is the ground truth moved ``dx`` posX classes."""

    def __init__(self, dx):
        super().__init__()
        self.dx, self.anchor = dx, torch.nn.Parameter(torch.zeros(()))

    def encode(self, x):
        return x, x

    def decode(self, z):
        p = torch.roll(z, shifts=self.dx * 2, dims=3).clamp(1e-4, 1 - 1e-4)  # 2 px a posX class
        return (p / (1 - p)).log()


@pytest.mark.slow  # about 3 s: Circles' 1,024 templates and matplotlib
@pytest.mark.parametrize("dx, right", [(0, True), (5, False)])
def test_the_picture_captions_each_reconstruction_with_the_judges_reading(tmp_path, monkeypatch, dx, right):
    import analysis.figures as figures
    from analysis.trained_models import judged_reconstructions

    drawn = {}
    monkeypatch.setattr(figures, "judged_strip", lambda truth, recon, captions, ok, path, title="":
                        drawn.update(truth=truth, captions=captions, ok=ok) or path)
    data = load_procedural("circles")
    path = judged_reconstructions(_Shift(dx), {"dataset": "circles", "split": "midpos"}, data,
                                  str(tmp_path / "j.png"), n_images=4)
    assert path == str(tmp_path / "j.png") and len(drawn["captions"]) == 4
    assert all(caption.startswith("posX=") and " posY=" in caption for caption in drawn["captions"])
    assert drawn["ok"] == [right] * 4
    # moved 5 classes right out of the 10-wide hole, some land on seen positions: read as "seen"
    assert right or any(caption.endswith("(seen)") for caption in drawn["captions"])
    monkeypatch.undo()  # the real figure, once
    real = judged_reconstructions(_Shift(dx), {"dataset": "circles", "split": "midpos"}, data,
                                  str(tmp_path / "real.png"), n_images=3)
    assert (tmp_path / "real.png").stat().st_size > 0 and real == str(tmp_path / "real.png")


class _CirclesByLookup(torch.nn.Module):
    """A "VAE" of Circles whose code is the image's (posX, posY) normalised to [0, 1], found by
    looking the image up in the grid, and whose decoder renders the circle at the code's position.
    ``snap``: the encoder maps a held-out position to the nearest seen one (M22's failing encoder)."""

    def __init__(self, snap: bool):
        super().__init__()
        self.snap, self.anchor = snap, torch.nn.Parameter(torch.zeros(()))
        self.space, self.split = factor_space("circles"), get_split("circles", "midpos")
        self.grid = self.space.all_classes()
        self.images = render_stored("circles", self.grid).reshape(len(self.grid), -1).astype(np.float32) / 255
        self.seen = self.grid[self.split.train_mask(self.grid, self.space)]

    def encode(self, x):
        flat = x.reshape(len(x), -1).cpu().numpy()
        nearest = ((self.images ** 2).sum(1)[None] - 2 * flat @ self.images.T).argmin(1)  # |x − t|² less |x|²
        classes = self.grid[nearest]
        if self.snap:
            held = ~self.split.train_mask(classes, self.space)
            for i in np.flatnonzero(held):
                classes[i] = self.seen[((self.seen - classes[i]) ** 2).sum(1).argmin()]
        code = torch.as_tensor(self.space.normalised(classes), dtype=torch.float32)
        return code, torch.zeros_like(code)

    def decode(self, z):
        classes = np.clip(np.rint(z.cpu().numpy() * 31), 0, 31).astype(int)
        p = torch.as_tensor(render_stored("circles", classes), dtype=torch.float32).div(255)
        return torch.logit(p.clamp(1e-4, 1 - 1e-4))


@pytest.mark.slow  # 5 to 20 s: two evaluations, each judging Circles' 1,024 templates
def test_the_decoder_fed_the_true_code_tells_a_snapping_encoder_from_a_failing_decoder():
    data = load_procedural("circles")
    split = get_split("circles", "midpos")
    config = EvaluationConfig(n_nll=20, n_metric=200, metrics=("rendering_judge",))
    snapping = evaluate(_CirclesByLookup(snap=True), data, split, config)
    # the reconstructions are snapped: read wrong, as seen positions; the decoder fed the true code
    # renders every held-out position right
    assert snapping["judge_accuracy_test"] < 0.5 and snapping["judge_substitution_share"] > 0.5
    assert snapping["judge_decoder_accuracy_test"] == 1.0
    assert snapping["judge_decoder_accuracy_in_distribution"] == 1.0
    assert snapping["judge_accuracy_in_distribution"] == 1.0  # training combinations are not snapped
    exact = evaluate(_CirclesByLookup(snap=False), data, split, config)
    assert exact["judge_accuracy_test"] == 1.0 == exact["judge_decoder_accuracy_test"]
    assert exact["judge_substitution_share"] == 0.0
