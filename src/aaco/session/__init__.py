"""session stage of the AACO pipeline."""
