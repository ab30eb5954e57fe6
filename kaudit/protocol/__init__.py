"""kaudit.protocol layer (see DESIGN.md §1)."""
