"""Training a model (`train`) on text sources (`corpus`). Imports `network`, `config` and the base."""
