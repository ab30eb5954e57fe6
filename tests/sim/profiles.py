"""Hypothesis profiles of the simulator: `sim-ci` (the default, `make test`: two histories per
fault kind, no shrinking: a known-failing kind must not spend the budget shrinking) and
`sim-bench` (KAUDIT_SIM_EXAMPLES=N histories per kind: `make bench`; shrunk on failure and kept
with KAUDIT_SIM_SAVE=1)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

_CHECKS = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
settings.register_profile("sim-ci", max_examples=2, deadline=None, derandomize=True, suppress_health_check=_CHECKS,
                          database=None, phases=[Phase.explicit, Phase.generate])
# shrinking only when the shrunk example is kept (KAUDIT_SIM_SAVE=1): a known-failing kind
# would otherwise spend minutes shrinking what is already in tests/sim/regressions/
_SHRINK = [Phase.shrink] if os.environ.get("KAUDIT_SIM_SAVE") else []
settings.register_profile("sim-bench", max_examples=max(1, int(os.environ.get("KAUDIT_SIM_EXAMPLES") or 25)),
                          deadline=None, suppress_health_check=_CHECKS, database=None,
                          phases=[Phase.explicit, Phase.generate] + _SHRINK)


def sim_settings():
    return settings.get_profile("sim-bench" if os.environ.get("KAUDIT_SIM_EXAMPLES") else "sim-ci")
