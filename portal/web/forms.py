"""The submit form: turns friendly inputs into the raw dict ``job_submit`` validates.

It only converts (shell-style command, ``NAME=value`` lines, the chosen models in the order
they were picked); every rule lives in ``parse_job_spec`` so the page and the API can never
disagree. Numbers carry their bounds (``min``/``max``/``step``) for the browser to help with,
but the form is ``novalidate``: the server reports every problem in one pass.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from django import forms

from portal.jobs.spec import (
    DEFAULT_CPU_PER_GPU,
    DEFAULT_MAX_RETRY,
    DEFAULT_MAX_RUNTIME_MINUTES,
    DEFAULT_MEMORY_GIB_PER_GPU,
    PRIORITY_BY_NAME,
    SpecLimits,
)
from portal.models import JobKind, SelectionPolicy, Team
from rules.jobspec import REQUEST_FIELDS

REQUIREMENT_CHOICES = [("constraints", "By constraints"), ("models", "By model list")]


class ModelSelect(forms.SelectMultiple):
    """A multi-select of GPU models whose options for models no cluster has are disabled:
    shown greyed, with why, but not choosable."""

    def __init__(self, *args: Any, unavailable: Collection[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unavailable = set(unavailable)

    def create_option(self, name: str, value: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        option = super().create_option(name, value, *args, **kwargs)
        if str(value) in self.unavailable:
            option["attrs"]["disabled"] = True
        return option


def _number(label: str, **kwargs: Any) -> forms.IntegerField:
    kwargs.setdefault("step_size", 1)
    return forms.IntegerField(label=label, **kwargs)


class JobSubmitForm(forms.Form):
    team = forms.ChoiceField(label="Team")
    name = forms.CharField(
        label="Job name",
        max_length=100,
        help_text="Letters, digits, spaces and . _ - : / +",
    )
    kind = forms.ChoiceField(label="Kind", choices=JobKind.choices, initial=JobKind.TRAINING)
    image = forms.CharField(
        label="Container image",
        max_length=512,
        help_text="For example nvcr.io/nvidia/pytorch:24.05-py3",
    )
    command = forms.CharField(
        label="Command",
        required=False,
        # several lines: a long torchrun line is read whole, and a line ending in \ goes on
        # on the next one, as in a shell
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "class": "mono"}),
        help_text="As in a shell, e.g. torchrun train.py --epochs 10; a line may end in \\ and "
        "go on on the next; empty runs the image's own",
    )
    args = forms.CharField(label="Arguments", required=False, help_text="Shell-quoted")
    env = forms.CharField(
        label="Environment variables",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One NAME=value per line; no secrets (stored in plain text, seen by the team)",
    )
    env_from_secrets = forms.CharField(
        label="Environment from secrets",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One NAME=secret/key per line, e.g. HF_TOKEN=hf-credentials/token: the variable "
        "is read on the cluster from that key of a Kubernetes Secret in the job's namespace; the "
        "value never reaches the portal",
    )
    replicas = _number(
        "Replicas", min_value=1, initial=1, help_text="Gang size: all replicas start together"
    )
    gpus_per_replica = _number("GPUs per replica", min_value=1, initial=1)
    gpu_memory_gib = _number(
        "Shared GPU: memory per replica (GiB)",
        required=False,
        min_value=1,
        max_value=4096,
        help_text="Empty: whole GPUs. Set: a share of one device on a shared GPU pool",
    )
    gpu_cores_percent = _number(
        "Shared GPU: compute per replica (%)",
        required=False,
        min_value=1,
        max_value=100,
        help_text="Empty: not capped",
    )
    cpu_per_replica = forms.FloatField(
        label="CPU cores per replica",
        required=False,
        min_value=0.1,
        max_value=512,
        step_size=0.1,
        help_text=f"Empty: {DEFAULT_CPU_PER_GPU} per GPU",
    )
    memory_gib_per_replica = forms.FloatField(
        label="Memory per replica (GiB)",
        required=False,
        min_value=0.25,
        max_value=4096,
        step_size=0.25,
        help_text=f"Empty: {DEFAULT_MEMORY_GIB_PER_GPU} GiB per GPU",
    )
    requirement = forms.ChoiceField(
        label="Choose GPUs",
        choices=REQUIREMENT_CHOICES,
        initial="constraints",
        widget=forms.RadioSelect,
    )
    min_gpu_memory_gib = _number(
        "Minimum memory per GPU (GiB)", required=False, min_value=1, max_value=4096
    )
    requires_bf16 = forms.BooleanField(label="Needs bfloat16 (bf16)", required=False)
    requires_fp8 = forms.BooleanField(label="Needs fp8", required=False)
    min_fp16_tflops = forms.FloatField(
        label="Minimum dense FP16 TFLOPS per GPU",
        required=False,
        min_value=0,
        max_value=100000,
        step_size=1,
    )
    gpu_models = forms.MultipleChoiceField(
        label="GPU models",
        required=False,
        help_text="Ctrl-click (⌘ on a Mac) to choose several; “My order of models” tries them in "
        "the order you choose them",
    )
    gpu_models_order = forms.CharField(required=False, widget=forms.HiddenInput)
    selection_policy = forms.ChoiceField(
        label="Which model first",
        choices=SelectionPolicy.choices,
        initial=SelectionPolicy.CHEAPEST,
    )
    allow_fallback = forms.BooleanField(
        label="Fall back to the next model when one is full", required=False, initial=True
    )
    priority = forms.ChoiceField(
        label="Priority", choices=[(p, p.capitalize()) for p in PRIORITY_BY_NAME], initial="normal"
    )
    max_runtime_minutes = _number(
        "Max runtime (minutes)",
        min_value=1,
        initial=DEFAULT_MAX_RUNTIME_MINUTES,
        help_text="The job is stopped (FAILED) when it runs longer",
    )
    max_retry = _number(
        "Retries after eviction",
        required=False,
        min_value=0,
        initial=DEFAULT_MAX_RETRY,
        help_text="Times the whole job is restarted when its pods are evicted (node lost, drained)",
    )
    port = _number(
        "Port (inference only)", required=False, min_value=1024, max_value=65535, initial=None
    )
    readiness_path = forms.CharField(
        label="Readiness path (inference only)",
        required=False,
        max_length=1024,
        help_text="HTTP path that answers 200 once the server is ready, e.g. /health; "
        "empty: ready once the port accepts connections",
    )

    def __init__(
        self,
        *args: Any,
        teams: Iterable[Team],
        models: Iterable[tuple[str, str]] = (),
        unavailable: Mapping[str, str] | None = None,
        limits: SpecLimits | None = None,
        priority_limits: Mapping[str, str] | None = None,
        for_template: bool = False,
        shared_pools: bool = True,
        **kwargs: Any,
    ) -> None:
        """``models``: (key, label) of the active catalog; ``unavailable``: key → why it
        cannot be chosen (no cluster has it); ``limits``: the submit bounds;
        ``priority_limits``: the highest priority each team allows; ``shared_pools``: whether
        any shared GPU pool exists (its fields are shown only then). A template's request has
        no team (the template's is used) and may leave the job name out."""
        super().__init__(*args, **kwargs)
        self.shared_pools = shared_pools
        if priority_limits:
            # Which priorities each team may use is its policy, set by platform admins.
            allowed = ", ".join(f"{team} up to {top}" for team, top in priority_limits.items())
            self.fields[
                "priority"
            ].help_text = f"Your teams' policies allow: {allowed}. Platform admins set them."
        if for_template:
            del self.fields["team"]
            self.fields["name"].required = False
            self.fields["name"].help_text = "Empty: the template's name"
            teams = ()
        choices = [(t.slug, t.name) for t in teams]
        if "team" in self.fields:
            self.fields["team"].choices = choices
            if len(choices) == 1:
                self.fields["team"].initial = choices[0][0]
        self._model_choices(list(models), dict(unavailable or {}))
        self._bounds(limits or SpecLimits())

    def _model_choices(self, models: list[tuple[str, str]], unavailable: dict[str, str]) -> None:
        present = [(k, label) for k, label in models if k not in unavailable]
        absent = [(k, f"{label} — {unavailable[k]}") for k, label in models if k in unavailable]
        field = self.fields["gpu_models"]
        groups: list[Any] = []
        if present:
            groups.append(("In the pool", present))
        if absent:
            groups.append(("Not available", absent))
        field.choices = groups
        field.widget = ModelSelect(
            unavailable=unavailable, attrs={"size": min(12, max(4, len(models) + 2))}
        )
        field.widget.choices = groups

    def _bounds(self, limits: SpecLimits) -> None:
        """The server's own limits as the inputs' ``max`` (validation stays the spec's)."""
        maxima = {
            "replicas": limits.max_replicas,
            "gpus_per_replica": limits.max_gpus_per_replica,
            "max_runtime_minutes": limits.max_runtime_minutes,
            "max_retry": limits.max_retry,
        }
        for name, maximum in maxima.items():
            self.fields[name].widget.attrs["max"] = maximum

    @property
    def show_shared(self) -> bool:
        """Whether to show the shared-GPU fields: only where a shared pool exists, or where
        the request already asks for a share (a template or resubmit from when one did), so a
        value is never dropped unseen."""
        if self.shared_pools:
            return True
        return any(
            self[name].value() not in (None, "") for name in ("gpu_memory_gib", "gpu_cores_percent")
        )

    @property
    def by_models(self) -> bool:
        value = self["requirement"].value()
        return value == "models"

    def _split(self, name: str) -> list[str]:
        # A backslash at the end of a line continues it, as in a shell (shlex alone would keep
        # the newline as an argument of its own).
        text = re.sub(r"\\\r?\n", " ", self.cleaned_data.get(name) or "")
        try:
            return shlex.split(text)
        except ValueError as exc:
            self.add_error(name, f"Cannot split this like a shell would: {exc}.")
            return []

    def _env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for lineno, line in enumerate((self.cleaned_data.get("env") or "").splitlines(), 1):
            if not line.strip():
                continue
            name, sep, value = line.partition("=")
            if not sep:
                self.add_error("env", f"Line {lineno}: expected NAME=value.")
                continue
            env[name.strip()] = value
        return env

    def _env_from_secrets(self) -> dict[str, dict[str, str]]:
        refs: dict[str, dict[str, str]] = {}
        for lineno, line in enumerate(
            (self.cleaned_data.get("env_from_secrets") or "").splitlines(), 1
        ):
            if not line.strip():
                continue
            name, sep, ref = line.partition("=")
            secret, slash, key = ref.strip().partition("/")
            if not sep or not slash:
                self.add_error("env_from_secrets", f"Line {lineno}: expected NAME=secret/key.")
                continue
            refs[name.strip()] = {"secret": secret.strip(), "key": key.strip()}
        return refs

    def _models_in_order(self) -> list[str]:
        chosen = list(self.cleaned_data.get("gpu_models") or [])
        order = [k.strip() for k in (self.cleaned_data.get("gpu_models_order") or "").split(",")]
        order = [k for k in dict.fromkeys(order) if k]
        if order and set(order) == set(chosen):
            return order
        return chosen

    def to_spec_data(self) -> dict[str, Any]:
        """The raw request ``parse_job_spec`` expects, from what cleaned; a field that did not
        clean is left out, so its one error (the form's) is not repeated by the spec."""
        d = self.cleaned_data
        data: dict[str, Any] = {
            "team": d.get("team"),
            "name": d.get("name") or None,
            "kind": d.get("kind"),
            "image": d.get("image"),
            "command": self._split("command"),
            "args": self._split("args"),
            "env": self._env(),
            "env_from_secrets": self._env_from_secrets(),
            "replicas": d.get("replicas"),
            "gpus_per_replica": d.get("gpus_per_replica"),
            "gpu_memory_gib": d.get("gpu_memory_gib"),
            "gpu_cores_percent": d.get("gpu_cores_percent"),
            "cpu_per_replica": d.get("cpu_per_replica"),
            "memory_gib_per_replica": d.get("memory_gib_per_replica"),
            "selection_policy": d.get("selection_policy"),
            "allow_fallback": bool(d.get("allow_fallback")),
            "priority": d.get("priority"),
            "max_runtime_minutes": d.get("max_runtime_minutes"),
            "max_retry": d.get("max_retry"),
            "port": d.get("port"),
            "readiness_path": d.get("readiness_path") or None,
        }
        if self.by_models:
            data["gpu_models"] = self._models_in_order()
        else:
            data.update(
                min_gpu_memory_gib=d.get("min_gpu_memory_gib"),
                requires_bf16=bool(d.get("requires_bf16")),
                requires_fp8=bool(d.get("requires_fp8")),
                min_fp16_tflops=d.get("min_fp16_tflops"),
            )
        return {k: v for k, v in data.items() if k not in self.errors}

    def add_spec_errors(self, fields: Mapping[str, list[str]]) -> None:
        """The spec's (or the service's) errors, on their fields; a field that already has
        the form's own error keeps just that one."""
        for name, messages in fields.items():
            target = name if name in self.fields else None
            if target is not None and target in self.errors:
                continue
            for message in messages:
                self.add_error(target, message if target else f"{name}: {message}")


def error_list(*forms_: forms.Form) -> list[tuple[str, str, str]]:
    """(field id, label, message) of every error of bound ``forms_``, in the order the fields
    are shown; the summary at the top of the page links each to its field."""
    out = []
    for form in forms_:
        if not form.is_bound:
            continue
        for field in form:
            if field.is_hidden:
                continue
            for message in field.errors:
                out.append((field.id_for_label or field.auto_id, str(field.label), str(message)))
    return out


_SHAPED_FIELDS = frozenset({"command", "args", "env", "env_from_secrets", "gpu_models"})
"""The request's fields the form shows in a shape of its own (a shell line, ``NAME=value``
lines, a picked list); every other one is its input as it is."""
_SIMPLE_FIELDS = tuple(f for f in REQUEST_FIELDS if f not in _SHAPED_FIELDS)


def initial_from_request(data: Mapping[str, Any]) -> dict[str, Any]:
    """A job request (the API's names: a resubmitted job's, a template's) as the form's
    initial values."""
    initial: dict[str, Any] = {}
    for name in _SIMPLE_FIELDS:
        if name in data and data[name] is not None:
            initial[name] = data[name]
    if data.get("command"):
        initial["command"] = shlex.join(data["command"])
    if data.get("args"):
        initial["args"] = shlex.join(data["args"])
    if data.get("env"):
        initial["env"] = "\n".join(f"{k}={v}" for k, v in data["env"].items())
    if data.get("env_from_secrets"):
        initial["env_from_secrets"] = "\n".join(
            f"{k}={ref.get('secret', '')}/{ref.get('key', '')}"
            for k, ref in data["env_from_secrets"].items()
        )
    models = list(data.get("gpu_models") or [])
    initial["requirement"] = "models" if models else "constraints"
    if models:
        initial["gpu_models"] = models
        initial["gpu_models_order"] = ",".join(models)
    return initial


class TemplateForm(forms.Form):
    """A template's own fields; its job request is a ``JobSubmitForm`` beside it."""

    template_name = forms.CharField(label="Template name", max_length=100)
    description = forms.CharField(
        label="Description",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="What it is for; shown when someone picks it",
    )
    scope = forms.ChoiceField(
        label="Who uses it",
        choices=[("personal", "Only me"), ("team", "The whole team (team admins manage it)")],
        initial="personal",
        widget=forms.RadioSelect,
    )
    template_team = forms.ChoiceField(label="Team")

    def __init__(self, *args: Any, teams: Iterable[Team], editing: bool = False, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.fields["template_team"].choices = [(t.slug, t.name) for t in teams]
        if editing:  # scope and team are fixed once made
            del self.fields["scope"]
            del self.fields["template_team"]


def template_spec_from(form: JobSubmitForm) -> dict[str, Any]:
    """The job request a template keeps: what the form says, without the team and without
    the empty values (so defaults stay defaults)."""
    data = form.to_spec_data()
    data.pop("team", None)
    return {k: v for k, v in data.items() if v not in (None, "", [], {})}
