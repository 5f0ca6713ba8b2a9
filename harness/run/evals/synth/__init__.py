"""Generators of the harness's own eval sets (ours, no external data).

  arith   arithmetic word problems in GSM8K format ({"question", "answer": "... #### N"})
  geo3k   diagram problems in the format of hiyouga/geometry3k (images, problem, answer),
          drawn locally; the answer can only be read from the image

Both are deterministic for a seed (numpy PCG64); the shipped sets in harness/inputs/data/ are
regenerated with `python -m harness.run.evals.synth {arith,geo3k} --out DIR`. The trained
zoo model (tools/train_models.py) learns from other seed streams of the same generators.
"""
