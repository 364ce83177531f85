"""The refusal to delete or rename a deployment that configuration still names.

Routes name deployments (``model.upstream``, a judge's ``deployment``, a memory extractor), and
routes sit above this app, so the places are found by routing's own code (``usage.naming``); the
error is this app's, so every caller of a delete or a rename (the API, the admin, the ORM) sees
one type: 409 ``conflict`` in the API's envelope, naming the routes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contextplatform.core.errors import ApiError


@dataclass(frozen=True)
class NamingPlace:
    """One place of the configuration that names a deployment: ``kind`` is ``route``, ``recipe``
    or ``tenant defaults`` (then ``owner`` is empty), ``path`` the field, e.g. ``model.upstream``
    or ``context.sources[1].match.judge.deployment``."""

    kind: str
    owner: str
    path: str

    def __str__(self) -> str:
        owner = f"{self.kind} {self.owner!r}" if self.owner else self.kind
        return f"{owner} ({self.path})"


class DeploymentInUse(ApiError):
    """Deleting or renaming ``deployment`` would leave ``places`` naming a deployment that is
    gone: refused until they name another."""

    def __init__(self, deployment: str, places: Sequence[NamingPlace], *, change: str) -> None:
        self.deployment = deployment
        self.places = tuple(places)
        self.routes = tuple(dict.fromkeys(p.owner for p in self.places if p.kind == "route"))
        named = ", ".join(str(place) for place in self.places)
        super().__init__(
            "conflict",
            f"deployment {deployment!r} cannot be {change}: it is named by {named}; "
            "point them at another deployment first",
            status=409,
        )
