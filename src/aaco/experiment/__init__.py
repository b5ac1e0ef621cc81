"""Experiments built of many runs: the interleaved A/B (:mod:`aaco.experiment.ab`) and the
guarded autotuner built on it (:mod:`aaco.experiment.tune`)."""
