"""The cluster's own record (KRaft metadata, tiered storage): leadership history, unclean elections, missing and stuck segments."""
