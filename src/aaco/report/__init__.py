"""report stage of the AACO pipeline."""
