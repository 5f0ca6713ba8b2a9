"""Judging one scenario's outputs against its golden: the logit and greedy comparison
with its tolerances (compare), the pipeline-boundary contract (contracts), and where a
numeric failure starts (localize). Accuracy evals are judged in harness/run/evals."""
