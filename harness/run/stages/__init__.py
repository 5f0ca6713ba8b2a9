"""The stages of one run of a setting, in the order they run:

  admit    everything that can refuse the run before a rank starts (engine, model,
           workloads, devices, fault switches, the reference to judge it by)
  execute  the ranks, on the devices the run holds (started and watched by harness/engines/launch/)
  judge    what the ranks left, held to the reference -> Verdict (ended.py: a run whose
           ranks did not all finish, or whose harness failed)

harness/run/runner.py runs a scenario through them; the golden, the Python API, the
conformance kit and the benchmarks call the same stages.
"""
