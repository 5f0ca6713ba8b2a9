"""Running and judging scenarios, and what a run leaves behind.

- request.py: what a user asked a run to do, typed (RunConfig; never an argparse Namespace);
- plan/: what a run runs and where (changes, schedule and shards, the first failure first,
  device slots and leases, nodes);
- stages/: admit -> execute -> judge, one scenario; runner.py: one scenario through the stages
  to verdict.json; session.py: many, in order or packed onto devices; raycluster/: as Ray work;
- compare/, golden.py, evals/, timings.py: outputs against a reference, stored goldens, task
  scores, where the time went;
- repro.py, bisect.py, conformance.py: `harness repro`, `harness bisect`, the conformance kit;
- report/: JUnit, Markdown, HTML, history, regressions, progress, merge and diff.

It stands on the inputs, the engines and the contract; the `harness` command and the ways in
stand on it.
"""
