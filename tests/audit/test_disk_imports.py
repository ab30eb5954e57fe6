"""A disk audit's start-up: the rule modules it loads do not pull in the wire protocol's decoders
(kaudit.protocol.wire: ~0.05-0.1 s of imports, a tenth of a 16 KiB-batch audit's decode)."""

from __future__ import annotations

import subprocess
import sys


def test_the_audit_and_the_disk_engine_do_not_import_the_wire_protocol():
    code = ("import sys, kaudit.cli, kaudit.audit, kaudit.engine.local, kaudit.sources.logdir\n"
            "print(sorted(m for m in sys.modules if m.startswith('kaudit.protocol.wire')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
