"""kaudit.audit layer (see DESIGN.md §1)."""
