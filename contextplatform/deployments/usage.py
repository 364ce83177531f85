"""Who names a deployment, and the guard that keeps a named one from being deleted or renamed.

The configuration naming deployments (routes, recipes, the tenant defaults) belongs to routing,
which sits above this app and so cannot be imported here. It answers through ``naming``: routing
connects a receiver in its ``AppConfig.ready`` that returns the places of the current schema
naming a deployment (``NamingPlace``). The guards below are connected to the model's own signals
(``pre_delete``, ``pre_save``) in this app's ``ready``, so a delete or a rename is refused on
every path, the API's, the admin's (its bulk action included) and a bare ORM call alike, inside the
transaction that would have deleted: nothing is removed.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

from contextplatform.deployments.errors import DeploymentInUse, NamingPlace
from contextplatform.deployments.models import Deployment

# Sent with ``name``; each receiver returns the places of the current schema naming it.
naming = Signal()


def places_naming(name: str) -> list[NamingPlace]:
    places: list[NamingPlace] = []
    for _, found in naming.send(sender=Deployment, name=name):
        places.extend(found or ())
    return places


def refusal(name: str, *, change: str = "deleted") -> DeploymentInUse | None:
    """The refusal of ``change`` (what was asked, e.g. "deleted") when configuration names
    ``name``, else None: for a page that says so before it asks to confirm."""
    places = places_naming(name)
    return DeploymentInUse(name, places, change=change) if places else None


def refuse_if_named(name: str, *, change: str = "deleted") -> None:
    refused = refusal(name, change=change)
    if refused is not None:
        raise refused


def refuse_named_delete(sender: Any, instance: Deployment, **kwargs: Any) -> None:
    refuse_if_named(instance.name)


def refuse_named_rename(
    sender: Any,
    instance: Deployment,
    raw: bool = False,
    update_fields: Any = None,
    **kwargs: Any,
) -> None:
    """A save that changes the name of a stored deployment is a rename: the old name must be free
    of uses (routes keep naming the old one). Fixtures (``raw``) and saves of other fields pass."""
    if raw or instance.pk is None or (update_fields is not None and "name" not in update_fields):
        return
    stored = Deployment.objects.filter(pk=instance.pk).values_list("name", flat=True).first()
    if stored is not None and stored != instance.name:
        refuse_if_named(stored, change=f"renamed to {instance.name!r}")
