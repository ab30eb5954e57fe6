"""Findings into incidents: what links findings into one story, and the cluster identity incident ids carry."""
