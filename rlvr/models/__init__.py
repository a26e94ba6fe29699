"""Model loading by id or path, and the embedded tiny model."""
