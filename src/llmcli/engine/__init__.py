"""Engines: the only code that runs a model. `base` defines the protocol and events."""
