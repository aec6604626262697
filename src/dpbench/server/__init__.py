"""Server tier: launch a real SGLang DP-attention server, replay a workload against it, read its metrics.

Modules: ``config`` (run config → checked ``launch_server`` command), ``launcher``
(process-group lifecycle), ``client`` (one streaming ``/generate`` request),
``loadgen`` (arrival schedule, concurrency, loop-lag monitor), ``stats`` (client
metrics), ``metrics`` (Prometheus deltas), ``run`` (one whole run, read top to bottom
through ``options``, ``prepare``, ``simlaunch``, ``lifetime``, ``replay_result`` and
``sim_steps``), ``bench`` (the runs behind the server's asv benchmarks), ``protocol_double`` (a protocol test double of SGLang's HTTP API for tests
and client benchmarks), ``cli``.
"""
