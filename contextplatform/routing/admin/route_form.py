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
from contextplatform.routing import services
from contextplatform.routing.models import Route
from sources.base import SOURCE_KINDS, OnFailure, SourceSettings, source_kind

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


class JsonTextField(forms.JSONField):
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


def kind_has_texts(type_name: str) -> bool:
    kind = source_kind(type_name)
    return kind is not None and "texts" in kind.Settings.model_fields


def source_type_choices() -> list[tuple[str, str]]:
    return [("", "---------"), *((name, name) for name in sorted(SOURCE_KINDS))]


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
    settings = JsonTextField(
        label="other settings",
        help_text="The kind's own settings as a JSON object.",
        widget=forms.Textarea(attrs={"rows": 3, "cols": 36}),
    )

    def clean_settings(self) -> dict[str, Any]:
        settings = self.cleaned_data["settings"] or {}
        columns = sorted(set(settings) & set(COMMON_SOURCE_FIELDS))
        if columns:
            raise ValidationError(f"{', '.join(columns)}: has its own column; remove it here.")
        return settings

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.text_lines() and "type" in cleaned:
            if not kind_has_texts(cleaned["type"]):
                self.add_error("texts", f"A {cleaned['type']} source has no texts.")
            elif "texts" in cleaned.get("settings", {}):
                self.add_error("texts", "The texts are in other settings too; keep one.")
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
        return {**source, **cleaned["settings"]}


class BaseSourceFormSet(forms.BaseFormSet):
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
    row["settings"] = rest or None
    return row


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


def layer_initial(route: Route) -> dict[str, Any]:
    """The form's initial values: what the route writes itself, blank where it inherits."""
    own = route.context if route.pk else {}
    budget = own.get("budget") or {}
    return {
        "model_name": route.model.get("name") or "",
        "upstream": route.model.get("upstream"),
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
    model_name = forms.CharField(required=False, max_length=200, label="Model name")
    upstream = forms.CharField(
        required=False,
        max_length=100,
        label="Upstream deployment",
        help_text="The name of one of this tenant's deployments (blank: none).",
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

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        for name, value in layer_initial(self.instance).items():
            self.initial.setdefault(name, value)
        stored = self.instance.context.get("sources", []) if self.instance.pk else []
        self.sources = SourceFormSet(
            self.data if self.is_bound else None,
            prefix="sources",
            initial=[source_row(source, order) for order, source in enumerate(stored, start=1)],
        )
        self.prepared: services.PreparedRoute | None = None
        self.written_rows: list[SourceRowForm] = []
        self.show_inherited_targets()

    def show_inherited_targets(self) -> None:
        """What a blank target field stands for: the recipe's and the tenant defaults' value."""
        inherited = self.instance.inherited_context()
        try:
            targets = CompressConfig.model_validate(inherited.get("compress") or {}).targets
        except PydanticValidationError:  # an inherited layer that no longer validates
            targets = CompressTargets()
        for kind in TARGET_KINDS:
            target = targets.of(kind)  # type: ignore[arg-type]
            mode = self.fields[target_field(kind, "mode")]
            mode.choices = [("", f"inherit ({target.mode})"), *mode.choices[1:]]
            for key, value in (
                ("min_tokens", target.min_tokens),
                ("target_tokens", target.effective_target),
            ):
                self.fields[target_field(kind, key)].widget.attrs["placeholder"] = str(value)

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
        model = {
            "name": cleaned["model_name"] or None,
            "context_window": cleaned["context_window"],
            "max_output_tokens": cleaned["max_output_tokens"],
            "upstream": cleaned["upstream"] or None,
        }
        recipe = cleaned.get("recipe")
        return {
            "name": cleaned["name"],
            "description": cleaned.get("description", ""),
            "model": {key: value for key, value in model.items() if value is not None},
            "recipe": recipe.name if recipe is not None else None,
            "context": self.written_layer(cleaned),
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
        if field in COMMON_SOURCE_FIELDS or field == "texts":
            row.add_error(field, below(rest, f".{field}", text))
        elif field is not None:
            row.add_error("settings", below(rest, "", text))
        else:
            row.add_error(None, text)
        if SOURCES_BELOW not in self.non_field_errors():
            self.add_error(None, SOURCES_BELOW)
