"""collectors stage of the AACO pipeline."""
