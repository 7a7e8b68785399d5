"""Hypothesis profiles: ``npu_lab`` (the default, keeps ``make test`` fast) and ``long`` (a
thorough run of the standing fuzz suite: ``pytest tests/test_fuzz_public_api.py
--hypothesis-profile=long``). Tests that set ``max_examples`` themselves keep their own count."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("npu_lab", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=1500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def pytest_configure(config):
    if not config.getoption("hypothesis_profile", None):    # --hypothesis-profile=long wins
        settings.load_profile("npu_lab")
