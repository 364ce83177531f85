"""The tenant admin's playground (``/admin/playground/``): pick a route, a user and a session, send
a message and see the answer, the context that was injected and the replay record, without writing
code. The message goes through the gateway as an application's call would
(``contextplatform.gateway.playground``); the session's earlier turns come back from the
platform's own session history, as they do for a client that sends only its latest message."""

from __future__ import annotations

import secrets
from typing import Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse

from contextplatform.gateway.playground import MAX_MESSAGE_CHARS, PlayedCall, play
from contextplatform.replay.admin.presentation import replay_sections
from contextplatform.replay.arrival import await_replay
from contextplatform.replay.selectors import replay_record
from contextplatform.routes.selectors import all_routes
from tenants.services import playground_key

NAME_PATTERN = r"^[A-Za-z0-9_.:@-]{1,200}$"


def new_session() -> str:
    return f"playground-{secrets.token_hex(4)}"


class PlaygroundForm(forms.Form):
    route = forms.ChoiceField(help_text="The route the message is sent on.")
    user = forms.RegexField(
        regex=NAME_PATTERN,
        max_length=200,
        initial="playground",
        help_text="Whose profile and memories the route reads (x-user-id).",
    )
    session = forms.RegexField(
        regex=NAME_PATTERN,
        max_length=200,
        help_text="The conversation (x-session-id): keep it to go on, change it to start anew.",
    )
    message = forms.CharField(
        max_length=MAX_MESSAGE_CHARS,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = list(all_routes().values_list("name", flat=True))
        self.fields["route"].choices = [(name, name) for name in names]  # type: ignore[attr-defined]


def record_sections(played: PlayedCall) -> dict[str, Any] | None:
    """The replay record of the call, as the record's own page shows it."""
    if played.resolve_id is None or not await_replay(played.resolve_id):
        return None
    record = replay_record(played.resolve_id)
    if record is None:
        return None
    return {
        **replay_sections(record),
        "url": reverse("admin:routing_replayrecord_change", args=[record.pk]),
    }


# Trying a route calls its deployment (and spends): the operators' permission, not every viewer's.
PERMISSION = "routing.change_route"


def playground(request: HttpRequest) -> TemplateResponse:
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied("the playground needs the permission to change routes")
    played: PlayedCall | None = None
    record: dict[str, Any] | None = None
    if request.method == "POST":
        form = PlaygroundForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            key = playground_key(request.tenant)  # type: ignore[attr-defined]
            messages = [{"role": "user", "content": data["message"]}]
            played = async_to_sync(play)(
                key, data["route"], data["user"], data["session"], messages
            )
            record = record_sections(played)
            # The next message goes on in the same session, the box emptied.
            form = PlaygroundForm(initial={**data, "message": ""})
    else:
        form = PlaygroundForm(initial={"user": "playground", "session": new_session()})
    context = {
        **admin.site.each_context(request),
        "title": "Playground",
        "form": form,
        "played": played,
        "record": record,
        "has_routes": bool(form.fields["route"].choices),  # type: ignore[attr-defined]
    }
    return TemplateResponse(request, "dashboard/playground.html", context)


# Any active staff user of the tenant (the admin's login page otherwise); never cached.
playground_view = admin.site.admin_view(playground)
