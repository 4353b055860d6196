"""One request, from the command line or a chat turn down to an engine and back. This package owns
driving a request (`drive.py`: Ctrl-C, every event to a sink, --debug), `generate`'s run of one
prompt and its `Result` (`generate.py`: stdout, the stats line, the `--json` record, the prompt
cache), the tool loop of one answer (`tool_loop.py`), the hook that writes each request to the
conversation log (`log.py`), and what the user is told in words after an answer: why it has none
(`endings.py`) and what speculative decoding could not do (`spec_notices.py`). It sits above the
output layer and the loader, below the REPL and the command line, and never reads the
environment; callers import its modules by name."""
