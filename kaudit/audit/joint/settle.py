"""What the log dirs settle of the capture's own suspicions in `kaudit audit`.

The capture alone cannot see what the brokers stored, so some of its findings are suspicions
told as such: records re-sent by a new producer session after a send that got no answer
(`duplicate-records` at warning, outcome "unknown": wire_resends.py). The join (join.py,
join_content.py) resolves that first send against the log by its batch key and by its records'
content; its produce-outcome then decides the suspicion: the records stored once prove there is
no duplicate - the suspicion is dropped, the produce-outcome (info) tells the crash's story: the
first send never stored, its re-send stored once -; stored twice make it the duplicate consumers
process twice (error). An unanswered Produce is settled by incidents.settle_unanswered (info);
the capture's own produce-outcome of it (a consumer's Fetch served it: stored_unanswered) gives way
to the join's.
"""

from __future__ import annotations

import json

from kaudit.audit.stories.incidents import details_of
from kaudit.audit.registry import _tail


def _resolutions(joined: list[dict]) -> dict:
    """(capture file, frame) of each send the join resolved -> its produce-outcome finding."""
    out: dict = {}
    for f in joined:
        if f["rule"] != "produce-outcome":
            continue
        for e in f.get("evidence") or ():
            if e.get("kind") == "produce" and e.get("position") is not None:
                out.setdefault((_tail(e.get("source")), e["position"]), f)
    return out


def _resolved(f: dict, resolved: dict) -> bool:
    return any(e.get("kind") == "produce" and (_tail(e.get("source")), e.get("position")) in resolved
               for e in f.get("evidence") or ())


def settle_wire(wire_findings: list[dict], joined: list[dict]) -> list[dict]:
    """The capture's findings with the suspicions the log decides settled: disproved ones left
    out, proved ones raised (in place; returns the findings kept)."""
    resolved = _resolutions(joined)
    if not resolved:
        return wire_findings
    drop = set()
    for f in wire_findings:
        if f["rule"] == "produce-outcome" and _resolved(f, resolved):
            drop.add(id(f))   # a consumer's copy of a send the log decided: the join's outcome tells it
            continue
        if f["rule"] != "duplicate-records" or f["severity"] != "warning":
            continue
        d = details_of(f)
        if d.get("outcome") != "unknown":
            continue
        got = next((resolved[k] for e in f.get("evidence") or ()
                    if (k := (_tail(e.get("source")), e.get("position"))) in resolved), None)
        if got is None:
            continue
        outcome = details_of(got).get("outcome")
        offsets = details_of(got).get("stored_offsets") or []
        if outcome == "stored once":
            drop.add(id(f))     # no copy: the join's produce-outcome says what became of the send
            continue
        if outcome == "stored twice":
            f["severity"] = "error"
            f["message"] += (f"; resolved with the log dirs: both sends are stored (offsets "
                             f"{', '.join(map(str, offsets))}): consumers process these records twice")
        else:
            continue
        d["outcome"] = outcome
        d["stored_offsets"] = offsets
        f["details"] = json.dumps(d) if isinstance(f.get("details"), str) else d
    return [f for f in wire_findings if id(f) not in drop] if drop else wire_findings
