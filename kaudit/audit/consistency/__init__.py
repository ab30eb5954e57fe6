"""The log dirs against themselves: integrity of segments and their indexes, state files and checkpoints, replicas against each other."""
