"""regress stage of the AACO pipeline: diffs against baselines, history, SLA checks."""
