"""Frame-level and reader rules on captures: requests and responses, read_committed consumers, the last stable offset."""
