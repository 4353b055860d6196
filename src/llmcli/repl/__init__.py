"""The chat REPL: session state, slash commands, live readout, and the input loop."""
