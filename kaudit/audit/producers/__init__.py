"""Idempotent producers: sequences and duplicates on stored batches and on Produce requests, and the broker's producer state they replay."""
