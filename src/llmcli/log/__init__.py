"""The conversation log: every request's record, local or served, kept in SQLite (`logs.db` in the
data directory), and read back by `llmcli logs`. After each request `generation` builds the row
(`rows.row_values`, under what `rows.Logged` names) and hands it to `writer.write` (a chat turn,
into the database) or `writer.defer` (a one-shot `generate`, to the pending file, `pending`); the
command line reads through `queries` (`reader`, `history`, `select`, `as_json`), `stats.speeds`,
`cap` (the size cap and `prune`) and `llm_import.import_llm`. `store` owns the file, its schema
and migrations and the connections (`native` keeps the WAL when one closes). Nothing in it is ever
in the answer's way: a log that cannot be written is one warning line, and the answer stands.
"""
