"""The deployment's token calibration: the formula (pure), and the one UPDATE that applies it."""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_tenants.utils import schema_context

from contextplatform.core import config_cache
from contextplatform.core.estimation import HeuristicEstimator
from contextplatform.deployments import calibration
from contextplatform.deployments.calibration import CalibratedEstimator, next_ratio
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.selectors import deployment_to_call
from contextplatform.deployments.services import (
    CalibrationStep,
    calibrate_deployments,
)
from tests.conftest import TenantFixture


def test_the_ratio_starts_at_one_and_moves_by_alpha() -> None:
    assert next_ratio(None, 2.0) == pytest.approx(1.2)
    assert next_ratio(1.2, 2.0) == pytest.approx(0.8 * 1.2 + 0.4)


def test_repeated_observations_converge_on_them() -> None:
    ratio: float | None = None
    distances = []
    for _ in range(30):
        ratio = next_ratio(ratio, 0.6)
        distances.append(abs(ratio - 0.6))
    assert distances == sorted(distances, reverse=True)
    assert distances[-1] < 0.001


def test_the_ratio_is_clamped() -> None:
    ratio: float | None = None
    for _ in range(100):
        ratio = next_ratio(ratio, 1000.0)
    assert ratio == calibration.MAX_RATIO
    for _ in range(100):
        ratio = next_ratio(ratio, 0.0001)
    assert ratio == calibration.MIN_RATIO


def test_an_empty_observation_says_nothing() -> None:
    assert calibration.observed_ratio(0, 100) is None
    assert calibration.observed_ratio(100, 0) is None
    assert calibration.observed_ratio(50, 100) == 0.5


def test_the_calibrated_estimator_multiplies_and_rounds_up() -> None:
    base = HeuristicEstimator()
    text = "one two three four five six seven eight nine ten"
    calibrated = CalibratedEstimator(base, 0.55)
    assert calibrated.count(text) == math.ceil(base.count(text) * 0.55)
    assert calibrated.count("") == 0
    assert calibrated.name == "heuristic_calibrated"
    assert CalibratedEstimator(base, 99).ratio == calibration.MAX_RATIO


@pytest.mark.django_db
def test_the_update_applies_the_formula(acme: TenantFixture) -> None:
    with schema_context(acme.schema):
        Deployment.objects.create(
            name="calibrated", protocol="openai", base_url="https://x.test/v1", model="m"
        )
        expected: float | None = None
        for provider, estimate in ((120, 100), (90, 100), (300, 100), (0, 100)):
            changed = calibrate_deployments([CalibrationStep("calibrated", provider, estimate)])
            observed = calibration.observed_ratio(provider, estimate)
            assert changed == (observed is not None)
            if observed is not None:
                expected = next_ratio(expected, observed)
        stored = Deployment.objects.get(name="calibrated")
        assert stored.calibration == pytest.approx(expected, rel=1e-9)
        assert stored.calibration_samples == 3
        assert not calibrate_deployments([CalibrationStep("missing", 1, 1)])


@pytest.mark.django_db
def test_a_batch_moves_each_deployment_once_as_its_steps_would_in_turn(
    acme: TenantFixture,
) -> None:
    """The replay writer's batch: one UPDATE per deployment, with the same result as applying
    each answer's step in order (the clamp included: 300/100 is past nothing, 900/100 past the
    maximum), and observations that say nothing left out."""
    answers = [(120, 100.0), (900, 100.0), (0, 100.0), (90, 100.0), (300, 100.0)]
    with schema_context(acme.schema):
        for name in ("one", "two"):
            Deployment.objects.create(
                name=name, protocol="openai", base_url="https://x.test/v1", model="m"
            )
        steps = [CalibrationStep("one", p, e) for p, e in answers]
        steps.insert(2, CalibrationStep("two", 50, 100.0))
        steps.append(CalibrationStep("missing", 1, 1.0))
        steps += [CalibrationStep("two", 110, 100.0)] * 200  # past any nesting limit
        assert calibrate_deployments(steps) == 2
        expected: float | None = None
        for provider, estimate in answers:
            observed = calibration.observed_ratio(provider, estimate)
            if observed is not None:
                expected = next_ratio(expected, observed)
        one, two = Deployment.objects.get(name="one"), Deployment.objects.get(name="two")
    assert one.calibration == pytest.approx(expected, rel=1e-9)
    assert one.calibration_samples == 4
    expected_two = next_ratio(None, 0.5)
    for _ in range(200):
        expected_two = next_ratio(expected_two, 1.1)
    assert two.calibration == pytest.approx(expected_two, rel=1e-9)
    assert two.calibration_samples == 201


def test_this_processs_copy_takes_the_ratio_its_update_returned(
    django_db_setup: Any, django_db_blocker: Any
) -> None:
    """Committed, as the writer's thread writes: one UPDATE per deployment and no read of it
    again; the call path's next copy counts with the new ratio, the shared old one is unchanged."""
    name = f"kept-{uuid.uuid4().hex[:8]}"
    with django_db_blocker.unblock(), schema_context("acme"):
        assert config_cache.wait_until_listening()
        Deployment.objects.create(
            name=name, protocol="openai", base_url="https://x.test/v1", model="m"
        )
        try:
            kept = deployment_to_call(name)
            assert kept is not None and kept.calibration is None
            with CaptureQueriesContext(connection) as queries:
                assert calibrate_deployments([CalibrationStep(name, 120, 100.0)]) == 1
            assert len(queries) == 1
            moved = deployment_to_call(name)
            assert moved is not None and moved is not kept
            assert moved.calibration == pytest.approx(next_ratio(None, 1.2), rel=1e-12)
            assert moved.calibration_samples == 1
            assert kept.calibration is None
        finally:
            Deployment.objects.filter(name=name).delete()
