"""Task scores (GSM8K, Geo3K) per scenario, compared item by item against the golden.

lm-eval is the scorer and stays in the harness process; the engine only generates.
The flow of one eval of one scenario:

  1. requests (harness/run/evals/lm.py, `collect`): lm-eval builds the task's requests from a
     task YAML reading local data (offline): few-shot contexts, stop strings, generation
     settings, exactly as its own `gsm8k` does. They become one run-brief workload of kind
     `generate` (harness/contract/runbrief.py), appended after the suite's own workloads, so the
     engine serves them in the scenario's single engine start.
  2. the engine generates greedily (batched), stopping a sequence at EOS or a stop sequence.
  3. scoring (lm.py, `score`): the generated tokens are decoded, cut at the stop strings,
     and handed back to lm-eval, which applies the task's filters (strict-match,
     flexible-extract) and metric (exact_match). The result holds the per-item correctness.
  4. comparison (harness/run/evals/paired.py): golden and scenario are paired by item: scores,
     the delta with a confidence interval, the items that flipped each way, an exact
     McNemar test, and the smallest drop the item count can detect.

Tasks are data: YAMLs in harness/run/evals/tasks/ (registry: tasks.py), each extending an
lm-eval task YAML read from the installed lm-eval at load time (only the data source and
what the task changes are overridden, so prompts, filters and metric cannot drift). Data the
harness ships lives in harness/inputs/data/ (GSM8K test/train, the generated arithmetic and Geo3K
sets); harness/run/evals/synth/ holds the generators of the generated sets.
"""
