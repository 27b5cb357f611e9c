"""List every registered split with its train and test counts on each dataset's full grid.

Run ``python -m data_pipeline.splits [DATASET ...]``.
"""

from __future__ import annotations

import numpy as np

from data_pipeline.cli import Parser, dataset_name
from data_pipeline.spaces import DATASETS, factor_space
from data_pipeline.splits.registry import modifiers_of, splits_of


def split_table(datasets=DATASETS) -> list[dict]:
    """One row per registered split: dataset, name, condition, train and test counts, aliases."""
    rows = []
    for dataset in datasets:
        space = factor_space(dataset)
        classes = space.all_classes()
        for split in splits_of(dataset):
            test = split.test_mask(classes, space)
            train = split.train_mask(classes, space)
            rows.append({
                "dataset": dataset, "name": split.name, "condition": split.condition,
                "train": int(train.sum()), "test": int(test.sum()), "grid": space.n_images,
                "aliases": ", ".join(split.aliases), "modifiers": ", ".join(m.name for m in split.modifiers),
                "description": split.description,
            })
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="python -m data_pipeline.splits", description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="*", type=dataset_name, default=list(DATASETS),
                        help=f"datasets to list (default: all of {', '.join(DATASETS)})")
    args = parser.parse_args(argv)
    rows = split_table(args.datasets)
    header = (f"{'dataset':<10} {'split':<30} {'condition':<26} {'train':>9} {'test':>8}  "
              "aliases / modifiers")
    print(header)
    print("-" * len(header))
    for r in rows:
        extra = r["aliases"] + (f" [modifiers: {r['modifiers']}]" if r["modifiers"] else "")
        print(f"{r['dataset']:<10} {r['name']:<30} {r['condition']:<26} {r['train']:>9,} "
              f"{r['test']:>8,}  {extra}")
    print()
    print("modifiers (AND onto both sides; with no split they filter the training set):")
    for dataset in args.datasets:
        space = factor_space(dataset)
        for m in modifiers_of(dataset):
            kept = int(np.count_nonzero(m.keep_mask(space.all_classes(), space)))
            aliases = f" (alias {', '.join(m.aliases)})" if m.aliases else ""
            print(f"  {dataset:<10} {m.name:<24} keeps {kept:>9,} of {space.n_images:,}{aliases}: "
                  f"{m.description}")


if __name__ == "__main__":
    main()
