"""The operator's side of the source syncs: when each source is due, where its worker runs (a Job in the
RAGEngine's namespace, or a child process), and what it reports (status.sources[], Events). The worker
itself, which fetches, parses and pushes, is ``sources`` (docs/sources.md)."""
