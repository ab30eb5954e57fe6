"""Modules a kaudit process never uses, refused so that nothing imports them on the way.

- `hypothesis`: kio registers Hypothesis strategies for its types whenever it can import it
  (a development install has it): ~0.07 s at start-up for nothing.
- `pandas`: pyarrow imports it on its first conversion of a Python list, only to check whether
  the list is a pandas object: ~0.2 s. The local engine and the pcap workers never use pandas;
  PySpark's driver does, so the command line refuses it only once the local engine is chosen.
- `dateutil`: pyarrow imports `dateutil.relativedelta` the first time it infers the type of a
  Python value (a bare string or number given to a compute function), only to recognise
  relativedelta objects, which kaudit never converts: ~0.01 s.

A refused import raises ModuleNotFoundError, which pyarrow and kio take for "not installed"."""

from __future__ import annotations

import sys

LOCAL_UNUSED = ("hypothesis", "pandas", "dateutil")


class _Refuse:
    names: frozenset = frozenset()

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in cls.names:
            raise ModuleNotFoundError(f"{name} is not used in this kaudit process", name=name)
        return None


def refuse(names=LOCAL_UNUSED) -> None:
    """Refuse importing `names` (top-level packages) from now on in this process; modules
    already imported stay."""
    _Refuse.names = _Refuse.names | frozenset(names)
    if _Refuse not in sys.meta_path:
        sys.meta_path.insert(0, _Refuse)
