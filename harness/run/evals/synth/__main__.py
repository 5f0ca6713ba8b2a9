"""python -m harness.run.evals.synth {arith,geo3k} --out DIR [--n N] [--seed S]"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.run.evals.synth import arith, geo3k


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.run.evals.synth", description=__doc__)
    parser.add_argument("kind", choices=["arith", "geo3k"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--n", type=int, help="test items (arith 500, geo3k 300)")
    parser.add_argument("--n-train", type=int, default=300, help="arith: few-shot pool size (train.jsonl)")
    parser.add_argument("--seed", type=int, help="test-set seed (arith: the few-shot pool's seed is fixed)")
    args = parser.parse_args(argv)
    if args.kind == "arith":
        if args.seed is not None:
            arith.TEST_SEED = args.seed
        arith.write_sets(args.out, args.n or 500, args.n_train)
        print(f"wrote {args.out}/test.jsonl and {args.out}/train.jsonl")
    else:
        geo3k.write_sets(args.out, args.n or 300, geo3k.TEST_SEED if args.seed is None else args.seed)
        print(f"wrote {args.out}/test.parquet")


if __name__ == "__main__":
    main()
