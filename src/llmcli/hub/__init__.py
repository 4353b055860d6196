"""Models: references, the default model, downloads into the HF cache, and the local store."""
