"""llmcli: run local language models from the terminal."""

__version__ = "0.1.0"
