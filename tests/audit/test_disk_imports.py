"""A disk audit's start-up: the rule modules it loads do not pull in the wire protocol's decoders
(kaudit.protocol.wire: ~0.05-0.1 s of imports, a tenth of a 16 KiB-batch audit's decode)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_audit_and_the_disk_engine_do_not_import_the_wire_protocol():
    code = ("import sys, kaudit.cli, kaudit.audit, kaudit.engine.local, kaudit.sources.logdir\n"
            "print(sorted(m for m in sys.modules if m.startswith('kaudit.protocol.wire')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"



def _run(code: str):
    out = subprocess.run([sys.executable, "-c", "import json, sys\n" + code], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


_SHOW = ("from kaudit.audit import registry\n"
         "print(json.dumps({'rules': list(registry.RULES), 'modules': sorted(sys.modules),"
         " 'txn': [r.id for r in registry.fold_rules('transactions')],"
         " 'consumers': [r.id for r in registry.fold_rules('consumers')]}))\n")


def test_each_side_loads_its_own_rule_modules_and_the_registry_is_whole_when_asked():
    """A disk audit loads no wire or consumer rule, a wire audit no log-dir consistency rule;
    `RULES` (kaudit rules, explain, --select, SARIF, docs/rules.md) holds every rule, in the
    order a full load registers them, and the rules each fold judges keep their order."""
    disk = _run("import kaudit.audit as A\nA.DISK_FOLDS\n" + _SHOW)
    wire = _run("import kaudit.audit as A\nA.WIRE_FOLDS\n" + _SHOW)
    full = _run("from kaudit.audit import RULES\n" + _SHOW)
    both = _run("import kaudit.audit as A\nA.DISK_FOLDS\nA.WIRE_FOLDS\nA.RULES\n" + _SHOW)
    assert not [m for m in disk["modules"] if m.startswith(("kaudit.audit.wire", "kaudit.audit.consumers"))]
    assert not [m for m in wire["modules"] if m.startswith("kaudit.audit.consistency.")
                and m != "kaudit.audit.consistency.log_chunks"]
    assert len(disk["rules"]) < len(full["rules"]) and len(wire["rules"]) < len(full["rules"])
    assert sorted(both["rules"]) == sorted(full["rules"])
    assert disk["txn"] == wire["txn"] == both["txn"] == full["txn"]
    assert wire["consumers"] == both["consumers"] == full["consumers"]


def test_a_rule_not_loaded_yet_is_found():
    """registry.get (every finding's rule) loads all the rule modules for a rule not registered."""
    out = _run("import kaudit.audit as A\nA.DISK_FOLDS\nfrom kaudit.audit import registry\n"
               "print(json.dumps(['lso-stuck' in registry.RULES, registry.get('lso-stuck').id]))")
    assert out == [False, "lso-stuck"]


def test_the_whole_registry_loads_every_module_that_defines_a_rule():
    """A new rule module left out of RULE_MODULES (and imported by none listed there) would be
    missing from `kaudit rules`, rules.md and SARIF: every module under kaudit/audit that
    registers a rule is loaded by `RULES`."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    defining = sorted(".".join(p.relative_to(root).with_suffix("").parts)
                      for p in (root / "kaudit" / "audit").rglob("*.py") if "@rule(" in p.read_text())
    full = _run("from kaudit.audit import RULES\n" + _SHOW)
    assert defining and not [m for m in defining if m not in full["modules"]]
