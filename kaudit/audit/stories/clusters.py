"""Which cluster a finding belongs to: the identity incident ids carry (incidents.assign).

A log dir names its cluster in `meta.properties` (`cluster.id`, written by the broker's format
step or ZooKeeper registration); a capture in its Metadata responses (`cluster_id`, v2+). Two
clusters often hold the same topic names, node ids and even the same file names, so the ids
hashed from those alone (registry.finding) could collide; the incident id adds the cluster. The
map is built from the inputs alone - the same whichever engine ran.
"""

from __future__ import annotations

import os


class ClusterMap:
    """Log dir path -> cluster id, capture path -> cluster ids, replica -> cluster ids."""

    def __init__(self, log_dirs: dict | None = None, captures: dict | None = None, replicas: dict | None = None):
        self.log_dirs = {os.path.normpath(k): v for k, v in (log_dirs or {}).items() if v}
        self.captures = {k: set(v) for k, v in (captures or {}).items() if v}
        self.replicas = {str(k): set(v) for k, v in (replicas or {}).items() if v}
        self._dirs = sorted(self.log_dirs, key=len, reverse=True)

    def merge(self, other: "ClusterMap | None") -> "ClusterMap":
        if other is None:
            return self
        reps = {k: set(v) for k, v in self.replicas.items()}
        for k, v in other.replicas.items():
            reps.setdefault(k, set()).update(v)
        caps = {k: set(v) for k, v in self.captures.items()}
        for k, v in other.captures.items():
            caps.setdefault(k, set()).update(v)
        return ClusterMap({**self.log_dirs, **other.log_dirs}, caps, reps)

    def all(self) -> set[str]:
        out = set(self.log_dirs.values())
        for v in list(self.captures.values()) + list(self.replicas.values()):
            out |= v
        return out

    def _of_source(self, source) -> set[str]:
        if not source:
            return set()
        if source in self.captures:
            return self.captures[source]
        p = os.path.normpath(str(source))
        for d in self._dirs:
            if p == d or p.startswith(d + os.sep):
                return {self.log_dirs[d]}
        return set()

    def of(self, f: dict) -> str | None:
        """The cluster id(s) of a finding: those of its evidence's files, else of its replicas,
        else the inputs' only cluster; None when unknown."""
        found: set[str] = set()
        for e in f.get("evidence") or []:
            found |= self._of_source(e.get("source"))
        if not found:
            for r in str(f.get("replica") or "").split(","):
                found |= self.replicas.get(r, set())
        if not found:
            every = self.all()
            if len(every) == 1:
                found = every
        return ",".join(sorted(found)) or None


def from_layout(layout) -> ClusterMap:
    """The cluster ids of a sources.logdir.Plan's log dirs (meta.properties)."""
    from kaudit.sources.logdir import log_dir_clusters

    dirs = log_dir_clusters(layout)
    reps: dict[str, set] = {}
    for t in layout.targets:
        d = t.log_dir
        if d is not None and dirs.get(d.path):
            reps.setdefault(d.replica, set()).add(dirs[d.path])
    return ClusterMap(dirs, None, reps)
