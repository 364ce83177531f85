"""The route's admin form: the route's own context layer as plain fields, and a formset of sources.

It stores what the operator wrote (the route's own layer, as the import does): a blank field
inherits from the route's recipe and the tenant defaults. Validation is the API's
(``services.prepare_route``); its error lands next to the field it names, in the form's words.
"""

from __future__ import annotations

import json
import re
from typing import Any, get_args

from django import forms
from django.core.exceptions import ValidationError
from pydantic import ValidationError as PydanticValidationError

from compression.config import CompressConfig, CompressTarget, CompressTargets
from contextplatform.core.errors import ApiError
from contextplatform.core.form_errors import (
    below,
    error_text,
    is_under,
    leading_name,
    refined_param,
)
from contextplatform.core.json_form_field import BoundedJSONField
from contextplatform.deployments.selectors import deployments
from contextplatform.routes import services
from contextplatform.routes.configuration.schema import upstream_names
from contextplatform.routes.models import Route, TenantDefaults
from sources.base import SOURCE_KINDS, OnFailure, SourceSettings, source_kind
from sources.models import Collection
from sources.rag.config import Backend
from sources.secret_settings import SHOWN, redact

COMMON_SOURCE_FIELDS: tuple[str, ...] = tuple(SourceSettings.model_fields)
BUDGET_KEYS = ("max_tokens", "reserve_output_tokens", "context_tokens", "session_max_tokens")
SOURCE_PARAM = re.compile(r"^context\.sources\[(\d+)\](.*)$")

SOURCES_BELOW = "Correct the sources below."
# The compress block's targets, edited as fields (kind x setting); the rest of the block is JSON.
TARGET_KINDS = tuple(CompressTargets.model_fields)
TARGET_KEYS = ("mode", "min_tokens", "target_tokens")
ALL_MODES = get_args(CompressTarget.model_fields["mode"].annotation)
MODES_OF_KIND = {
    kind: ("preserve", "truncate")
    if kind == "current_user"
    else tuple(m for m in ALL_MODES if m != "truncate")
    for kind in TARGET_KINDS
}


def target_field(kind: str, key: str) -> str:
    return f"target_{kind}_{key}"


def target_fields() -> dict[str, forms.Field]:
    fields: dict[str, forms.Field] = {}
    for kind in TARGET_KINDS:
        label = "RAG" if kind == "rag" else kind.replace("_", " ").capitalize()
        fields[target_field(kind, "mode")] = forms.ChoiceField(
            required=False,
            label=label,
            choices=[("", "inherit"), *((mode, mode) for mode in MODES_OF_KIND[kind])],
        )
        for key, words in (("min_tokens", "from"), ("target_tokens", "to")):
            fields[target_field(kind, key)] = forms.IntegerField(
                required=False,
                label=words,
                widget=forms.NumberInput(attrs={"style": "width: 7em"}),
            )
    return fields


# A plain form holding the target fields, for RouteForm to inherit them as declared fields.
CompressTargetFields = type("CompressTargetFields", (forms.Form,), target_fields())

# Where an error of the validated route (its ``param``) is shown; the longest match wins.
ROUTE_PARAMS: dict[str, str] = {
    "name": "name",
    "description": "description",
    "recipe": "recipe",
    "model": "context_window",
    "model.name": "model_name",
    "model.context_window": "context_window",
    "model.max_output_tokens": "max_output_tokens",
    "model.upstream": "upstream",
    "model.balance": "balance",
    "context.enabled": "enabled",
    "context.budget": "budget_max_tokens",
    **{f"context.budget.{key}": f"budget_{key}" for key in BUDGET_KEYS},
    "context.injection": "injection_mode",
    "context.compress": "compress",
    **{
        param: field
        for kind in TARGET_KINDS
        for param, field in (
            # A check over one target (target_tokens below min_tokens) is about its target.
            (f"context.compress.targets.{kind}", target_field(kind, "target_tokens")),
            *(
                (f"context.compress.targets.{kind}.{key}", target_field(kind, key))
                for key in TARGET_KEYS
            ),
        )
    },
}


class JsonTextField(BoundedJSONField):
    """JSON in a textarea; blank stands for "not written" (``None``)."""

    def __init__(self, *, indent: int | None = None, **kwargs: Any):
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)
        self.indent = indent

    def prepare_value(self, value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, str):  # the operator's own (possibly invalid) text, shown again
            return value
        return json.dumps(value, indent=self.indent, ensure_ascii=False)

    def clean(self, value: Any) -> Any:
        cleaned = super().clean(value)
        if cleaned is not None and not isinstance(cleaned, dict):
            raise ValidationError("Write a JSON object such as {}, or leave it blank.")
        return cleaned


class ConnectorsField(JsonTextField):
    """A realtime_apis source's connectors: a JSON list of objects; blank stands for none."""

    def clean(self, value: Any) -> Any:
        cleaned = BoundedJSONField.clean(self, value)
        if cleaned is not None and not (
            isinstance(cleaned, list) and all(isinstance(each, dict) for each in cleaned)
        ):
            raise ValidationError(
                'Write a JSON list of connectors such as [{"name": "balance", "url": '
                '"https://bank.example/accounts/{user}/balance"}], or leave it blank.'
            )
        return cleaned


CONNECTOR_PARAM = re.compile(r"^\.connectors(?:\[(\d+)\](?:\.(.+))?)?$")


class AutoOrNumberField(forms.CharField):
    """Blank (inherit), ``auto`` or a whole number; the route schema checks the range."""

    def to_python(self, value: Any) -> int | str | None:
        text = str(super().to_python(value)).strip()
        if text in ("", "auto"):
            return text or None
        try:
            return int(text)
        except ValueError:
            raise ValidationError("Write auto or a whole number.") from None


# A rag source's backend settings shown as columns (column -> the backend_config key it edits);
# the rest of backend_config stays in "other settings". The secret column is write-only.
BACKEND_COLUMNS: dict[str, dict[str, str]] = {
    "vectorstore": {"backend_target": "collection"},
    "milvus": {
        "backend_target": "collection",
        "backend_server": "uri",
        "backend_secret": "token",
        "content_field": "content_field",
        "metadata_field": "metadata_field",
    },
    "qdrant": {
        "backend_target": "collection",
        "backend_server": "url",
        "backend_secret": "api_key",
        "content_field": "content_field",
        "metadata_field": "metadata_field",
    },
    "openai": {
        "backend_target": "vector_store_id",
        "backend_server": "base_url",
        "backend_secret": "api_key",
    },
}
COLUMN_WORDS = {
    "backend_target": "collection / store",
    "backend_server": "server",
    "backend_secret": "secret",
    "content_field": "content field",
    "metadata_field": "metadata field",
}
SECRET_KEPT = "stored: blank keeps it"


def column_of(backend: str, key: str) -> str | None:
    """The row column editing ``backend_config.<key>`` of a ``backend`` source, if any."""
    return next((c for c, k in BACKEND_COLUMNS.get(backend, {}).items() if k == key), None)


def kind_has_texts(type_name: str) -> bool:
    kind = source_kind(type_name)
    return kind is not None and "texts" in kind.Settings.model_fields


def source_type_choices() -> list[tuple[str, str]]:
    return [("", "---------"), *((name, name) for name in sorted(SOURCE_KINDS))]


# The row's fields that only some kinds of source have; the others are every source's. A row shows
# only its kind's (and, for a rag source, its backend's): the page's script keeps them in step
# with the type and backend chosen, and a cell holding an error is always shown.
TYPED_FIELDS: tuple[str, ...] = ("texts", "backend", *COLUMN_WORDS, "connectors", "judge_note")
COLLECTIONS_LIST = "tenant-collections"
TYPED_SOURCE_KEYS = ("type", "backend", "settings")  # the datalist of the tenant's own collections


def kinds_with_texts() -> list[str]:
    return sorted(name for name in SOURCE_KINDS if kind_has_texts(name))


def shown_typed_fields(type_name: str, backend: str) -> list[str]:
    """The typed fields a row of ``type_name`` (a rag row: of ``backend``) shows."""
    shown = ["texts"] if kind_has_texts(type_name) else []
    if type_name == "rag":
        shown += ["backend", *BACKEND_COLUMNS.get(backend or "vectorstore", {}), "judge_note"]
    if type_name == "realtime_apis":
        shown.append("connectors")
    return shown


def typed_fields_map() -> dict[str, Any]:
    """What the page's script needs to recompute ``shown_typed_fields`` as the operator types."""
    return {
        "typed": list(TYPED_FIELDS),
        "texts": kinds_with_texts(),
        "backends": {name: list(columns) for name, columns in BACKEND_COLUMNS.items()},
    }


def written_backend_of(settings: Any) -> str:
    """The backend named in a row's "other settings" (a dict, or its JSON text), if any."""
    if isinstance(settings, str):
        try:
            settings = json.loads(settings)
        except ValueError:
            return ""
    backend = settings.get("backend") if isinstance(settings, dict) else None
    return backend if isinstance(backend, str) else ""


class SourceRowForm(forms.Form):
    """One source: its common fields as columns, the kind's own settings as a JSON object."""

    name = forms.CharField(
        required=False, max_length=48, widget=forms.TextInput(attrs={"size": 12})
    )
    type = forms.ChoiceField(choices=source_type_choices)
    enabled = forms.BooleanField(required=False, initial=True)
    priority = forms.IntegerField(
        required=False, widget=forms.NumberInput(attrs={"style": "width: 5em"})
    )
    timeout_ms = forms.IntegerField(
        required=False,
        label="timeout (ms)",
        widget=forms.NumberInput(attrs={"style": "width: 6em"}),
    )
    on_failure = forms.ChoiceField(
        required=False,
        choices=[("", "default"), *((value, value) for value in get_args(OnFailure))],
    )
    texts = forms.CharField(
        required=False,
        strip=False,
        label="guardrail texts",
        help_text="One text per line (sources with texts, such as skill_guardrails).",
        widget=forms.Textarea(attrs={"rows": 3, "cols": 28}),
    )
    backend = forms.ChoiceField(
        required=False,
        help_text="A rag source's backend (blank: vectorstore, or as written in other settings).",
        choices=[("", "---------"), *((name, name) for name in get_args(Backend))],
    )
    backend_target = forms.CharField(
        required=False,
        label="collection / store",
        help_text="vectorstore, milvus, qdrant: collection; openai: vector_store_id.",
        widget=forms.TextInput(attrs={"size": 12}),
    )
    backend_server = forms.CharField(
        required=False,
        label="server",
        help_text="milvus: uri (a server, or a Milvus Lite file such as docs.db); qdrant: url "
        "(a server, or a local-mode directory name); openai: base_url. Blank: the default.",
        widget=forms.TextInput(attrs={"size": 16}),
    )
    backend_secret = forms.CharField(
        required=False,
        strip=False,
        label="secret",
        help_text="milvus: token; qdrant, openai: api_key. Write-only, stored encrypted: blank "
        'keeps the stored one; to remove it write "token": null (or "api_key": null) under '
        "backend_config in other settings.",
        widget=forms.PasswordInput(render_value=False, attrs={"size": 10}),
    )
    content_field = forms.CharField(
        required=False,
        label="content field",
        help_text="milvus, qdrant: the field holding the text (blank: content).",
        widget=forms.TextInput(attrs={"size": 8}),
    )
    metadata_field = forms.CharField(
        required=False,
        label="metadata field",
        help_text="milvus, qdrant: the field holding the metadata the filter reads.",
        widget=forms.TextInput(attrs={"size": 8}),
    )
    connectors = ConnectorsField(
        indent=2,
        label="connectors",
        help_text='realtime_apis: a JSON list, one object per connector: "name", "method" (GET, '
        'POST), "url" ({user}, {session}, {query} in its path or query string only), "headers", '
        '"body" (POST), "select" (a JSON path: $, .key, [n], [*]), "timeout_ms", '
        '"cache_ttl_seconds", "max_items", "max_response_bytes". Header values are write-only: '
        'a stored one shows as {"set": true}, which kept as it is keeps the value.',
        widget=forms.Textarea(attrs={"rows": 3, "cols": 36}),
    )
    settings = JsonTextField(
        label="other settings",
        help_text="The kind's own settings as a JSON object. A rag source whose judge is a "
        "deployment (match.judge.deployment, else the route's upstream) makes one extra call to "
        'it per request (the judge\'s cost); "local" judges on this server.',
        widget=forms.Textarea(attrs={"rows": 3, "cols": 36}),
    )

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if self.initial.get("secret_set"):
            self.fields["backend_secret"].widget.attrs["placeholder"] = SECRET_KEPT
        self.fields["backend_target"].widget.attrs["list"] = COLLECTIONS_LIST

    def shown_fields(self) -> str:
        """The typed fields this row shows as drawn (space-separated, for the row's data-shows)."""
        if self.is_bound:
            values = {key: self.data.get(self.add_prefix(key), "") for key in TYPED_SOURCE_KEYS}
        else:
            values = {key: self.initial.get(key) or "" for key in TYPED_SOURCE_KEYS}
        backend = values["backend"] or written_backend_of(values["settings"])
        return " ".join(shown_typed_fields(str(values["type"]), str(backend)))

    def clean_settings(self) -> dict[str, Any]:
        settings = self.cleaned_data["settings"] or {}
        columns = sorted(set(settings) & set(COMMON_SOURCE_FIELDS))
        if columns:
            raise ValidationError(f"{', '.join(columns)}: has its own column; remove it here.")
        return settings

    def backend_columns(self) -> dict[str, Any]:
        """The backend columns written (or, for the secret, the stored one kept)."""
        return {
            column: self.cleaned_data.get(column)
            for column in COLUMN_WORDS
            if self.cleaned_data.get(column) not in (None, "")
        }

    def chosen_backend(self) -> str:
        settings = self.cleaned_data.get("settings") or {}
        written = settings.get("backend") if isinstance(settings.get("backend"), str) else None
        return self.cleaned_data.get("backend") or written or "vectorstore"

    def clean_backend_columns(self, cleaned: dict[str, Any]) -> None:
        columns = self.backend_columns()
        if not columns and not cleaned.get("backend"):
            return
        if cleaned.get("type") != "rag":
            self.add_error("backend", f"A {cleaned.get('type')} source has no backend.")
            return
        settings = cleaned.get("settings") or {}
        if cleaned.get("backend") and "backend" in settings:
            self.add_error("backend", "The backend is in other settings too; keep one.")
        backend = self.chosen_backend()
        config = settings.get("backend_config")
        config = config if isinstance(config, dict) else {}
        for column in columns:
            key = BACKEND_COLUMNS.get(backend, {}).get(column)
            if key is None:
                self.add_error(column, f"A {backend} backend has no {COLUMN_WORDS[column]}.")
            elif key in config:
                self.add_error(column, f"{key} is in other settings too; keep one.")

    def written_backend(self, source: dict[str, Any]) -> dict[str, Any]:
        """The source with its backend columns folded into ``backend`` and ``backend_config``."""
        cleaned = self.cleaned_data
        settings = dict(cleaned.get("settings") or {})
        backend = self.chosen_backend()
        mapping = BACKEND_COLUMNS.get(backend, {})
        columns = self.backend_columns()
        secret_key = mapping.get("backend_secret")
        config = settings.get("backend_config")
        config = dict(config) if isinstance(config, dict) else {}
        keeps_secret = secret_key is not None and secret_key not in config
        if not columns and not cleaned.get("backend") and not (keeps_secret and config):
            return {**source, **settings}
        if cleaned.get("backend"):
            settings["backend"] = cleaned["backend"]
        for column, value in columns.items():
            config[mapping[column]] = value
        if keeps_secret and secret_key not in config:
            config[secret_key] = dict(SHOWN)  # blank: keep what is stored (if anything)
        settings["backend_config"] = config
        return {**source, **settings}

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.text_lines() and "type" in cleaned:
            if not kind_has_texts(cleaned["type"]):
                self.add_error("texts", f"A {cleaned['type']} source has no texts.")
            elif "texts" in cleaned.get("settings", {}):
                self.add_error("texts", "The texts are in other settings too; keep one.")
        if "type" in cleaned and "settings" in cleaned:
            self.clean_backend_columns(cleaned)
        if cleaned.get("connectors") is not None and "type" in cleaned:
            if cleaned["type"] != "realtime_apis":
                self.add_error("connectors", f"A {cleaned['type']} source has no connectors.")
            elif "connectors" in (cleaned.get("settings") or {}):
                self.add_error("connectors", "The connectors are in other settings too; keep one.")
        return cleaned

    def text_lines(self) -> list[str]:
        text = self.cleaned_data.get("texts") or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    def written(self) -> dict[str, Any]:
        """The source as the operator wrote it: blank columns are left to the kind's defaults."""
        cleaned = self.cleaned_data
        source: dict[str, Any] = {"type": cleaned["type"]}
        if cleaned["name"]:
            source["name"] = cleaned["name"]
        if not cleaned["enabled"]:
            source["enabled"] = False
        for key in ("priority", "timeout_ms"):
            if cleaned[key] is not None:
                source[key] = cleaned[key]
        if cleaned["on_failure"]:
            source["on_failure"] = cleaned["on_failure"]
        if self.text_lines():
            source["texts"] = self.text_lines()
        if cleaned.get("connectors") is not None:
            source["connectors"] = cleaned["connectors"]
        if cleaned["type"] == "rag":
            return self.written_backend(source)
        return {**source, **cleaned["settings"]}


class BaseSourceFormSet(forms.BaseFormSet):
    def typed_fields(self) -> dict[str, Any]:
        return typed_fields_map()

    def collections(self) -> list[str]:
        """The tenant's own collections, offered for a rag row's collection (any other name is
        still written: another backend's collection, or refused as unknown by the route's
        validation)."""
        return list(Collection.objects.order_by("name").values_list("name", flat=True))

    def add_fields(self, form: forms.Form, index: int | None) -> None:
        super().add_fields(form, index)
        form.fields["ORDER"].widget.attrs["style"] = "width: 4em"


SourceFormSet = forms.formset_factory(
    SourceRowForm,
    formset=BaseSourceFormSet,
    extra=1,
    can_delete=True,
    can_order=True,
    max_num=32,
    validate_max=True,
)


def source_row(source: dict[str, Any], order: int) -> dict[str, Any]:
    """A stored source as a row's initial values."""
    rest = {key: value for key, value in source.items() if key not in COMMON_SOURCE_FIELDS}
    row: dict[str, Any] = {
        "name": source.get("name", ""),
        "type": source.get("type", ""),
        "enabled": source.get("enabled") is not False,
        "priority": source.get("priority"),
        "timeout_ms": source.get("timeout_ms"),
        "on_failure": source.get("on_failure", ""),
        "ORDER": order,
    }
    texts = rest.get("texts")
    one_line_each = isinstance(texts, list) and all(
        isinstance(text, str) and text.strip() and "\n" not in text for text in texts
    )
    if kind_has_texts(row["type"]) and texts and one_line_each:
        row["texts"] = "\n".join(rest.pop("texts"))
    if row["type"] == "rag":
        backend_row(rest, row)
    if row["type"] == "realtime_apis" and isinstance(rest.get("connectors"), list):
        row["connectors"] = rest.pop("connectors")
    row["settings"] = rest or None
    return row


def backend_row(rest: dict[str, Any], row: dict[str, Any]) -> None:
    """A stored rag source's backend settings moved from ``rest`` to the row's columns (text values
    only; the secret as whether one is stored)."""
    backend = rest.get("backend", "vectorstore")
    config = rest.get("backend_config")
    mapping = BACKEND_COLUMNS.get(backend) if isinstance(backend, str) else None
    if mapping is None or not isinstance(config, dict):
        return
    if "backend" in rest:
        row["backend"] = rest.pop("backend")
    config = dict(config)
    for column, key in mapping.items():
        value = config.get(key)
        if column == "backend_secret":
            row["secret_set"] = value is not None and key in config
            config.pop(key, None)
        elif isinstance(value, str):
            row[column] = config.pop(key)
    if config:
        rest["backend_config"] = config
    else:
        rest.pop("backend_config", None)


def written_targets(cleaned: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The target fields that were filled in, as the compress block's ``targets``."""
    targets: dict[str, dict[str, Any]] = {}
    for kind in TARGET_KINDS:
        written = {
            key: cleaned.get(target_field(kind, key))
            for key in TARGET_KEYS
            if cleaned.get(target_field(kind, key)) not in (None, "")
        }
        if written:
            targets[kind] = written
    return targets


# A fallback list (written through the API) is one choice of the select, its names joined: a
# save from the form keeps it as it is. Deployment names hold no comma.
FALLBACK_JOIN = ","


def upstream_choice(stored: Any) -> str | None:
    """The select's value for a stored ``model.upstream``: a name, or a fallback list joined."""
    names = upstream_names(stored)
    return FALLBACK_JOIN.join(names) if isinstance(stored, list) else (names or [None])[0]


def written_upstream(choice: str) -> str | list[str] | None:
    if not choice:
        return None
    return choice.split(FALLBACK_JOIN) if FALLBACK_JOIN in choice else choice


def layer_initial(route: Route) -> dict[str, Any]:
    """The form's initial values: what the route writes itself, blank where it inherits."""
    own = route.context if route.pk else {}
    budget = own.get("budget") or {}
    return {
        "model_name": route.model.get("name") or "",
        "upstream": upstream_choice(route.model.get("upstream")),
        "prompt_cache": bool(route.model.get("prompt_cache")),
        "balance": route.model.get("balance"),
        "enabled": {True: "true", False: "false"}.get(own.get("enabled"), ""),
        "inherit_sources": route.pk is not None and "sources" not in own,
        **{f"budget_{key}": budget.get(key) for key in BUDGET_KEYS},
        "injection_mode": (own.get("injection") or {}).get("mode", ""),
        **compress_initial(own.get("compress")),
    }


def compress_initial(compress: Any) -> dict[str, Any]:
    """The target fields from the compress block's ``targets``; the rest of the block as JSON.
    Targets the fields cannot hold (written by hand in another shape) stay in the JSON, where the
    form refuses them with a message."""
    targets = compress.get("targets") if isinstance(compress, dict) else None
    if not isinstance(targets, dict) or not fits_target_fields(targets):
        return {"compress": compress}
    rest = {key: value for key, value in compress.items() if key != "targets"}
    initial: dict[str, Any] = {"compress": rest or None}
    for kind, target in targets.items():
        for key, value in target.items():
            initial[target_field(kind, key)] = value
    return initial


def fits_target_fields(targets: dict[str, Any]) -> bool:
    return all(
        kind in TARGET_KINDS and isinstance(target, dict) and set(target) <= set(TARGET_KEYS)
        for kind, target in targets.items()
    )


class RouteForm(CompressTargetFields, forms.ModelForm):
    model_name = forms.CharField(
        required=False,
        max_length=200,
        label="Model name",
        help_text="The model this route is written for, such as gpt-4o-mini: a note that the "
        "API and the export show beside the context window. The gateway sends the upstream "
        "deployment's own model name, whatever is written here.",
    )
    upstream = forms.ChoiceField(
        required=False,
        label="Upstream deployment",
        help_text="The deployment the gateway forwards the route's calls to (blank: none). A "
        "fallback list, written through the API's model.upstream, shows as one choice and is kept. "
        "It also judges rag sources naming no judge deployment: one extra call per request and "
        "source (the judge's cost).",
    )
    prompt_cache = forms.BooleanField(
        required=False,
        label="Provider prompt cache",
        help_text="Mark the stable start of each request for Anthropic's cache; context goes after it.",
    )
    balance = JsonTextField(
        indent=None,
        label="Load balancing",
        help_text='Over the list above; blank: fallback order. {"strategy": "latency"}, or '
        '"weighted" with "weights", or "least_busy".',
        widget=forms.TextInput(attrs={"size": 70}),
    )
    enabled = forms.TypedChoiceField(
        required=False,
        label="Context enabled",
        choices=[("", "inherit"), ("true", "yes"), ("false", "no")],
        coerce=lambda value: value == "true",
        empty_value=None,
    )
    inherit_sources = forms.BooleanField(
        required=False,
        label="Inherit sources",
        help_text="Use the sources of the recipe and tenant defaults; the rows below are ignored.",
    )
    budget_max_tokens = AutoOrNumberField(
        required=False, label="Max input tokens", help_text="auto, a number, or blank to inherit."
    )
    budget_reserve_output_tokens = AutoOrNumberField(
        required=False,
        label="Reserve output tokens",
        help_text="auto, a number, or blank to inherit.",
    )
    budget_context_tokens = forms.IntegerField(
        required=False, label="Context tokens", help_text="Cap on injected context; blank inherits."
    )
    budget_session_max_tokens = forms.IntegerField(
        required=False,
        min_value=1,
        label="Session max tokens",
        help_text="Tokens one session may spend through the gateway; blank inherits.",
    )
    injection_mode = forms.ChoiceField(
        required=False,
        label="Injection mode",
        choices=[("", "inherit"), ("tool_role", "tool_role"), ("system_prompt", "system_prompt")],
    )
    compress = JsonTextField(
        indent=2,
        label="Other compress settings",
        help_text="The rest of the route's own compress block (mode, match, recovery, ...) as "
        'JSON; blank inherits. Example: {"match": {"recall": {"method": "bm25"}}}',
        widget=forms.Textarea(attrs={"rows": 6, "cols": 70}),
    )

    class Meta:
        model = Route
        fields = ["name", "description", "recipe", "context_window", "max_output_tokens"]
        # A line or two says what a route is for; the page is long enough below.
        widgets = {"description": forms.Textarea(attrs={"rows": 3, "cols": 60})}

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        for name, value in layer_initial(self.instance).items():
            self.initial.setdefault(name, value)
        self.fields["upstream"].choices = self.upstream_choices()  # type: ignore[attr-defined]
        # Secrets as {"set": true}: a row shows whether one is stored, never what.
        stored = redact(self.instance.context).get("sources", []) if self.instance.pk else []
        self.sources = SourceFormSet(
            self.data if self.is_bound else None,
            prefix="sources",
            initial=[source_row(source, order) for order, source in enumerate(stored, start=1)],
        )
        self.prepared: services.PreparedRoute | None = None
        self.written_rows: list[SourceRowForm] = []
        self.show_inherited_targets()

    def upstream_choices(self) -> list[tuple[str, str]]:
        """The tenant's deployments; a stored name that is not one any more stays choosable, so
        that the page opens and the route's validation says what is wrong with it."""
        names = list(deployments().order_by("name").values_list("name", flat=True))
        stored = self.initial.get("upstream")
        choices = [("", "none"), *((name, name) for name in names)]
        if isinstance(stored, str) and FALLBACK_JOIN in stored:
            label = " → ".join(stored.split(FALLBACK_JOIN)) + " (fallbacks, set through the API)"
            choices.append((stored, label))
        elif isinstance(stored, str) and stored and stored not in names:
            choices.append((stored, stored))
        return choices

    def show_inherited_targets(self) -> None:
        """What a blank target field stands for, and which layer it comes from: the recipe, the
        tenant defaults, or the platform's default of a compress block. Without a compress block
        beneath, a blank stands for no compression at all (the stage does not run), and a
        ``preserve`` target keeps its content whole, so neither shows token thresholds."""
        inherited = self.instance.inherited_context()
        if inherited.get("compress") is None:
            for kind in TARGET_KINDS:
                mode = self.fields[target_field(kind, "mode")]
                mode.choices = [("", "inherit (no compression)"), *mode.choices[1:]]
            return
        try:
            targets = CompressConfig.model_validate(inherited.get("compress") or {}).targets
        except PydanticValidationError:  # an inherited layer that no longer validates
            targets = CompressTargets()
        for kind in TARGET_KINDS:
            target = targets.of(kind)  # type: ignore[arg-type]
            where = self.target_origin(kind)
            mode = self.fields[target_field(kind, "mode")]
            mode.choices = [("", f"inherit: {target.mode}, {where}"), *mode.choices[1:]]
            if target.mode == "preserve":
                continue
            for key, value in (
                ("min_tokens", target.min_tokens),
                ("target_tokens", target.effective_target),
            ):
                self.fields[target_field(kind, key)].widget.attrs["placeholder"] = str(value)

    def target_origin(self, kind: str) -> str:
        """The layer a target's inherited value comes from, in the operator's words."""

        def writes(context: Any) -> bool:
            compress = context.get("compress") if isinstance(context, dict) else None
            targets = compress.get("targets") if isinstance(compress, dict) else None
            return isinstance(targets, dict) and kind in targets

        recipe = self.instance.recipe if self.instance.recipe_id is not None else None
        if recipe is not None and writes(recipe.context):
            return f"from recipe {recipe.name}"
        if writes(TenantDefaults.current_context()):
            return "from the tenant defaults"
        return "platform default"

    def clean_compress(self) -> dict[str, Any] | None:
        compress = self.cleaned_data["compress"]
        if compress and "targets" in compress:
            raise ValidationError("targets: they have their own fields above; remove them here.")
        return compress

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        sources_valid = cleaned.get("inherit_sources") or self.sources.is_valid()
        if not sources_valid:
            self.add_error(None, SOURCES_BELOW)
        if self.errors:
            return cleaned
        try:
            self.prepared = services.prepare_route(self.written_route(cleaned))
        except ApiError as error:
            # The written rows, read before the first row error makes the formset invalid.
            inherit = cleaned.get("inherit_sources")
            self.written_rows = [] if inherit else list(self.sources.ordered_forms)
            for each in error.every():  # every problem found, each next to its field
                self.show_error(each)
        return cleaned

    def written_route(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        # What the page does not edit of the stored model (settings written through the API)
        # is kept; what it edits is written over it, a blank field removing it.
        stored = self.instance.model if self.instance.pk else {}
        model = {
            **(stored if isinstance(stored, dict) else {}),
            "name": cleaned["model_name"] or None,
            "context_window": cleaned["context_window"],
            "max_output_tokens": cleaned["max_output_tokens"],
            "upstream": written_upstream(cleaned["upstream"]),
            "prompt_cache": True if cleaned.get("prompt_cache") else None,
            "balance": cleaned.get("balance"),
        }
        recipe = cleaned.get("recipe")
        return {
            "name": cleaned["name"],
            "description": cleaned.get("description", ""),
            "model": {key: value for key, value in model.items() if value is not None},
            "recipe": recipe.name if recipe is not None else None,
            "context": self.written_layer(cleaned),
            # The form does not edit the variants (the API does): a save keeps them as they are,
            # secrets as ``{"set": true}``, which the service keeps.
            "variants": [
                {**variant, "context": redact(variant.get("context") or {})}
                for variant in (self.instance.variants if self.instance.pk else None) or []
            ],
        }

    def written_layer(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        layer: dict[str, Any] = {}
        if cleaned["enabled"] is not None:
            layer["enabled"] = cleaned["enabled"]
        if not cleaned["inherit_sources"]:
            layer["sources"] = [row.written() for row in self.sources.ordered_forms]
        compress = dict(cleaned["compress"] or {})
        targets = written_targets(cleaned)
        if targets:
            compress["targets"] = targets
        if cleaned["compress"] is not None or targets:
            layer["compress"] = compress
        budget = {
            key: cleaned[f"budget_{key}"]
            for key in BUDGET_KEYS
            if cleaned[f"budget_{key}"] is not None
        }
        if budget:
            layer["budget"] = budget
        if cleaned["injection_mode"]:
            layer["injection"] = {"mode": cleaned["injection_mode"]}
        return layer

    def show_error(self, error: ApiError) -> None:
        param, text = error.param or "", error_text(error)
        source = SOURCE_PARAM.match(param)
        if source is not None:
            self.show_source_error(int(source.group(1)), source.group(2), text, error)
            return
        param = refined_param(param, text, lambda candidate: candidate in ROUTE_PARAMS)
        bases = [base for base in ROUTE_PARAMS if is_under(param, base)]
        if not bases:
            self.add_error(None, error.message)
            return
        base = max(bases, key=len)
        self.add_error(ROUTE_PARAMS[base], below(param, base, text))

    def show_source_error(self, index: int, rest: str, text: str, error: ApiError) -> None:
        rows = self.written_rows
        if index >= len(rows):  # an inherited source (the recipe's or the tenant defaults')
            self.add_error(None, f"An inherited source is not valid here: {error.message}")
            return
        row = rows[index]
        if not rest and leading_name(text) in COMMON_SOURCE_FIELDS:
            rest = f".{leading_name(text)}"  # a check over the whole source names the field
        member = re.match(r"^\.([A-Za-z_]+)", rest)
        field = member.group(1) if member else None
        if field == "texts" and not row.text_lines():
            field = "settings"  # the texts were written in the JSON
        if in_connectors_column(row, field, text):
            row.add_error("connectors", connector_error(row, rest, text))
            if SOURCES_BELOW not in self.non_field_errors():
                self.add_error(None, SOURCES_BELOW)
            return
        if field in (None, "backend_config", "backend"):
            column, text = backend_error_column(row, rest, text)
            if column is not None:
                row.add_error(column, text)
                if SOURCES_BELOW not in self.non_field_errors():
                    self.add_error(None, SOURCES_BELOW)
                return
        if field in COMMON_SOURCE_FIELDS or field == "texts":
            row.add_error(field, below(rest, f".{field}", text))
        elif field is not None:
            row.add_error("settings", below(rest, "", text))
        else:
            row.add_error(None, text)
        if SOURCES_BELOW not in self.non_field_errors():
            self.add_error(None, SOURCES_BELOW)


def backend_error_column(row: SourceRowForm, rest: str, text: str) -> tuple[str | None, str]:
    """The backend column an error of a rag row belongs to (``backend_config.collection: Field
    required`` under the collection column), and its text there."""
    if not hasattr(row, "cleaned_data") or row.cleaned_data.get("type") != "rag":
        return None, text
    where = f"{rest.lstrip('.')}: {text}" if rest else text
    if where.startswith("backend:") or where.startswith("backend "):
        return "backend", where.removeprefix("backend:").strip()
    match = re.match(r"^backend_config\.([A-Za-z_]+)\b[:]?\s*(.*)$", where, re.DOTALL)
    if match is None:
        return None, text
    column = column_of(row.chosen_backend(), match.group(1))
    return (column, match.group(2) or text) if column else (None, text)


def in_connectors_column(row: SourceRowForm, field: str | None, text: str) -> bool:
    """An error about a realtime_apis row's connectors (``.connectors[0].url``, or a check over
    the whole source naming them), when they were written in their column."""
    cleaned = getattr(row, "cleaned_data", {})
    if cleaned.get("connectors") is None:
        return False
    return field == "connectors" or (field is None and leading_name(text) == "connectors")


def connector_error(row: SourceRowForm, rest: str, text: str) -> str:
    """An error of a connector (``.connectors[1].url``) in the connectors column's words: which
    connector (its number and name) and which of its fields."""
    match = CONNECTOR_PARAM.match(rest)
    if match is None or match.group(1) is None:
        return text
    index = int(match.group(1))
    written = getattr(row, "cleaned_data", {}).get("connectors") or []
    name = written[index].get("name") if index < len(written) else None
    where = f"connector {index + 1}" + (f" ({name})" if isinstance(name, str) and name else "")
    return f"{where}, {match.group(2)}: {text}" if match.group(2) else f"{where}: {text}"
