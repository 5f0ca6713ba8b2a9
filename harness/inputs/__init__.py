"""What a scenario is made of, read and checked before anything runs.

- scenarios/: scenario files (schema, bounded YAML reading, loading, binding to an engine,
  the Scenario and its matrix or covering-array expansion) and a run's typed request;
- models/ and zoo/: what `model:` names, built or found as a checkpoint with its identity;
  the tiny models built locally from configs and seeds, or shipped trained weights;
- workloads.py, chat.py, images.py, media.py: prompts tokenized once, chat templates,
  synthetic images, videos and audio clips;
- envs.py: engine environments (`--engine-env`), every scenario once per engine version;
- data/: the eval data sets shipped with the package (nothing is downloaded at run time).

It stands on the engines (a scenario file is bound to its engine's axes and rules) and the
contract; what runs and judges a scenario (harness/run/) stands on it.
"""
