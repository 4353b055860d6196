"""`llmcli batch`: many prompts in one run, batched locally (engine/batched.py) or side by side
against a server; input formats, order, resumable output (docs/BATCH.md)."""
