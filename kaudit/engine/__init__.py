"""kaudit.engine layer (docs/architecture.md §1)."""
