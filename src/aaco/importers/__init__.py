"""importers stage of the AACO pipeline."""
