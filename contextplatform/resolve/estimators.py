"""Which token estimator a resolve counts with, and how its counts are labelled.

A route whose upstream deployment is an OpenAI model of a known family counts with that model's
tokenizer (``exact``); a route whose deployment has a calibration from its provider's reported
usage counts with the heuristic times that ratio (``provider_calibrated``, as vLLM Semantic Router
labels such counts); any other route with the heuristic alone (``estimated``). The budget, packing
and compression all see the chosen estimator's counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from contextplatform.core.estimation import TokenEstimator, default_estimator
from contextplatform.core.exact_tokens import exact_estimator_for
from contextplatform.deployments.calibration import CalibratedEstimator
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.selectors import deployment_named
from contextplatform.routes.configuration.schema import RouteSpec

CountLabel = Literal["estimated", "exact", "provider_calibrated"]


@dataclass(frozen=True)
class EstimatorChoice:
    estimator: TokenEstimator
    label: CountLabel
    deployment: str | None = None
    calibration: float | None = None

    def labels(self) -> dict[str, Any]:
        """The fields a report's and a replay record's ``tokens`` gain beside the counts."""
        labels: dict[str, Any] = {"label": self.label}
        if self.deployment:
            labels["deployment"] = self.deployment
        if self.calibration is not None:
            labels["calibration"] = round(self.calibration, 6)
        return labels

    def uncalibrated(self, count: int) -> float:
        """The heuristic's count behind one of this choice's counts."""
        if isinstance(self.estimator, CalibratedEstimator):
            return self.estimator.uncalibrated(count)
        return float(count)


def estimated() -> EstimatorChoice:
    return EstimatorChoice(estimator=default_estimator(), label="estimated")


def estimator_for(spec: RouteSpec, deployment: Deployment | None = None) -> EstimatorChoice:
    """The estimator of a route: its deployment's exact tokenizer, else its calibration.
    ``deployment``: the route's upstream deployment when the caller read it already."""
    name = spec.model.primary_upstream
    if not isinstance(name, str) or not name:
        return estimated()
    if deployment is None or deployment.name != name:
        deployment = deployment_named(name)
    if deployment is None:
        return estimated()
    exact = exact_estimator_for(deployment.protocol, deployment.model)
    if exact is not None:
        return EstimatorChoice(estimator=exact, label="exact", deployment=deployment.name)
    if deployment.calibration is None:
        return EstimatorChoice(
            estimator=default_estimator(), label="estimated", deployment=deployment.name
        )
    calibrated = CalibratedEstimator(default_estimator(), deployment.calibration)
    return EstimatorChoice(
        estimator=calibrated,
        label="provider_calibrated",
        deployment=deployment.name,
        calibration=calibrated.ratio,
    )
