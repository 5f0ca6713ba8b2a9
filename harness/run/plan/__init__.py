"""What a run runs and where: change-picked PR selection (changes), costs, order and
shards (schedule), the chosen list of a `harness run` (planning), device slots and
leases (devices) and the nodes of a multi-machine run (nodes)."""
