"""kaudit.sources layer (see DESIGN.md §1)."""
