"""Draw training and held-out examples of a split side by side, like M21 Figure 1b.

Run ``python -m data_pipeline.show DATASET --split NAME --out FILE.png [--n 8] [--seed 0]``.
The images come from the procedural generator (or, with ``--data-dir``, the real file).
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from data_pipeline.cli import Parser, dataset_name, reason, whole_number, writable_file
from data_pipeline.datasets import GroundTruthDataset, load_procedural
from data_pipeline.splits import get_split


def split_examples(dataset: GroundTruthDataset, split_name: str, n: int = 8, seed: int = 0):
    """(train rows, test rows): up to ``n`` seeded examples of each side of the split."""
    split = get_split(dataset.name, split_name, space=dataset.factor_space)
    train, test = split.train_test_indices(dataset.classes, dataset.factor_space)
    rng = np.random.default_rng(seed)
    pick = lambda rows: np.sort(rng.choice(rows, size=min(n, len(rows)), replace=False))  # noqa: E731
    return pick(train), pick(test)


def draw_split(dataset: GroundTruthDataset, split_name: str, out, n: int = 8, seed: int = 0) -> None:
    """Save a figure: training examples on the left, held-out examples on the right."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    split = get_split(dataset.name, split_name, space=dataset.factor_space)
    train, test = split_examples(dataset, split_name, n, seed)
    cols = int(np.ceil(np.sqrt(n)))
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, 2 * cols + 1, figsize=(1.3 * (2 * cols + 1), 1.4 * rows + 0.8),
                             squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for _side, (picked, offset) in enumerate(((train, 0), (test, cols + 1))):
        for i, row in enumerate(picked):
            image = dataset.images[row].transpose(1, 2, 0)
            ax = axes[i // cols, offset + i % cols]
            ax.imshow(image[..., 0] if image.shape[-1] == 1 else image, cmap="gray", vmin=0, vmax=255)
    axes[0, cols // 2].set_title("training", fontsize=10)
    axes[0, cols + 1 + cols // 2].set_title("held out (test)", fontsize=10)
    fig.suptitle(f"{dataset.name}: {split.name} ({split.condition.replace('_', ' ')})", fontsize=11)
    fig.savefig(out, dpi=100, bbox_inches="tight")
    plt.close(fig)


MAX_EXAMPLES = 100  # per side: a figure of at most 10 x 21 small images


def build_parser() -> Parser:
    parser = Parser(prog="python -m data_pipeline.show", description=__doc__.splitlines()[0])
    parser.add_argument("dataset", help="a dataset name, or 'labelled' with --data-dir")
    parser.add_argument("--split", required=True, help="split name or alias, e.g. blank_side")
    parser.add_argument("--out", required=True, help="output image file, e.g. split.png")
    parser.add_argument("--n", type=whole_number(1), default=8,
                        help=f"examples per side (at most {MAX_EXAMPLES})")
    parser.add_argument("--seed", type=whole_number(0), default=0)
    parser.add_argument("--n-images", type=whole_number(1), default=4000,
                        help="grid points rendered to pick from (more than the grid: the whole grid)")
    parser.add_argument("--data-dir", default=None, help="load the real file from this folder instead")
    return parser


def _check_arguments(parser: Parser, args) -> None:
    """Refuse bad arguments before anything is rendered or loaded."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backend_bases import FigureCanvasBase

    if args.n > MAX_EXAMPLES:
        parser.fail("--n", f"expected at most {MAX_EXAMPLES} examples per side; got {args.n}")
    writable_file(parser, "--out", args.out)
    suffix = args.out.rsplit(".", 1)[-1].lower() if "." in args.out.rsplit("/", 1)[-1] else ""
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix and suffix not in formats:
        parser.fail("--out", f"matplotlib cannot write .{suffix} files; end the name in one of "
                             f"{', '.join('.' + f for f in sorted(formats))}")
    if args.dataset.lower() == "labelled":
        if not args.data_dir:
            parser.fail("--data-dir", "the labelled dataset is read from a file; give the folder that holds "
                                      "labelled.npz or labelled.h5")
        return
    try:
        args.dataset = dataset_name(args.dataset)
    except argparse.ArgumentTypeError as error:
        parser.fail("dataset", f"{reason(error)}, or 'labelled' with --data-dir")
    try:
        get_split(args.dataset, args.split)
    except KeyError as error:
        parser.fail("--split", reason(error))
    if args.data_dir is not None and not os.path.isdir(args.data_dir):
        parser.fail("--data-dir", f"no folder {args.data_dir}; give the folder that holds the real file")


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_arguments(parser, args)
    if args.data_dir:
        from data_pipeline.loaders import load_real

        try:
            data = load_real(args.dataset, data_dir=args.data_dir)
        except (OSError, ValueError) as error:  # a missing or malformed file: the loaders say which
            parser.fail("--data-dir", reason(error))
    else:
        data = load_procedural(args.dataset, n_images=args.n_images, seed=args.seed)
    if data.name == "labelled":  # its splits are known only once its factors are read
        try:
            get_split(data.name, args.split, space=data.factor_space)
        except KeyError as error:
            parser.fail("--split", reason(error))
    draw_split(data, args.split, args.out, n=args.n, seed=args.seed)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
