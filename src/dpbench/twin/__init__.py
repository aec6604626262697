"""Scheduler twin: SGLang's real PrefillAdder and PrefillDelayer on N DP-rank processes joined by gloo, simulated time.

- :mod:`.config` — frozen run settings; :mod:`.scheduler` — one rank's pass and state;
  :mod:`.ranks` — the rank processes and the lockstep loop; :mod:`.cost` — the model of
  time; :mod:`.metrics` — what a run reports; :mod:`.run` — the entry point
  (``python -m dpbench.twin.run``); :mod:`.plot` — the timeline; :mod:`.cli` —
  ``dpbench twin run``; :mod:`.bench` — the runs behind the twin's asv benchmarks;
  :mod:`.saturated` — a fixed rank for timing one pass; :mod:`.profiles` — the cost model's
  named profiles; :mod:`.published` — published DeepSeek serving figures and the cost model's
  prediction of each; :mod:`.clock` and :mod:`.clockfit` — the predicted / published table
  and the published-fit profile's fit (``dpbench twin clock``).
"""
