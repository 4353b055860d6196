"""Embeddings: a run from texts to vectors (`runs`), collections of them in SQLite
(`collections`), and ranking by cosine similarity (`collections.rank`)."""
