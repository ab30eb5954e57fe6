"""kaudit.report layer (see DESIGN.md §1)."""
