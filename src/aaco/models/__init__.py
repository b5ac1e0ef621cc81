"""models stage of the AACO pipeline."""
