"""kaudit.report layer (docs/architecture.md §1)."""
