"""analysis stage of the AACO pipeline."""
