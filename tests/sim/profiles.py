"""Hypothesis profiles of the simulator: `ci` (the default, `make test`: a couple of histories per
fault kind) and `bench` (KAUDIT_SIM_EXAMPLES=N histories per kind, `make bench`)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_CHECKS = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
settings.register_profile("sim-ci", max_examples=2, deadline=None, derandomize=True, suppress_health_check=_CHECKS,
                          database=None)
settings.register_profile("sim-bench", max_examples=max(1, int(os.environ.get("KAUDIT_SIM_EXAMPLES") or 25)),
                          deadline=None, suppress_health_check=_CHECKS)


def sim_settings():
    return settings.get_profile("sim-bench" if os.environ.get("KAUDIT_SIM_EXAMPLES") else "sim-ci")
