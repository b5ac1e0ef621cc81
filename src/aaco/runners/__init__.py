"""runners stage of the AACO pipeline."""
