"""kaudit.sources layer (docs/architecture.md §1)."""
