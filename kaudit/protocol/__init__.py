"""kaudit.protocol layer (docs/architecture.md §1)."""
