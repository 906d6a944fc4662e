"""The submit form: turns friendly text inputs into the raw dict ``job_submit`` validates.

It only converts (shell-style command, ``NAME=value`` lines, comma-separated models); every
rule lives in ``parse_job_spec`` so the page and the API can never disagree.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

from django import forms

from portal.jobs.spec import DEFAULT_MAX_RETRY, DEFAULT_MAX_RUNTIME_MINUTES, PRIORITY_BY_NAME
from portal.models import JobKind, SelectionPolicy, Team


class JobSubmitForm(forms.Form):
    team = forms.ChoiceField()
    name = forms.CharField(
        max_length=100, widget=forms.TextInput(attrs={"placeholder": "resnet50-sweep-3"})
    )
    kind = forms.ChoiceField(choices=JobKind.choices, initial=JobKind.TRAINING)
    image = forms.CharField(
        max_length=512,
        widget=forms.TextInput(attrs={"placeholder": "nvcr.io/nvidia/pytorch:24.05-py3"}),
    )
    command = forms.CharField(
        required=False,
        help_text="As in a shell, e.g. torchrun train.py --epochs 10",
        widget=forms.TextInput(attrs={"placeholder": "python train.py"}),
    )
    args = forms.CharField(required=False, help_text="Extra arguments, shell-quoted")
    env = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "BATCH_SIZE=256\nEPOCHS=10"}),
        help_text="One NAME=value per line; no secrets (stored in plain text).",
    )
    replicas = forms.IntegerField(min_value=1, initial=1, help_text="Gang size: all start together")
    gpus_per_replica = forms.IntegerField(min_value=1, initial=1)
    cpu_per_replica = forms.FloatField(
        required=False, min_value=0.1, help_text="Cores (default 4 per GPU)"
    )
    memory_gib_per_replica = forms.FloatField(
        required=False, min_value=0.25, help_text="GiB (default 16 per GPU)"
    )
    requirement = forms.ChoiceField(
        choices=[("constraints", "By constraints"), ("models", "By model list")],
        initial="constraints",
        widget=forms.RadioSelect,
    )
    gpu_models = forms.CharField(
        required=False, help_text="Comma-separated model keys, in order of preference"
    )
    min_gpu_memory_gib = forms.IntegerField(
        required=False, min_value=1, label="Min GPU memory (GiB)"
    )
    requires_bf16 = forms.BooleanField(required=False, label="Needs bf16")
    requires_fp8 = forms.BooleanField(required=False, label="Needs fp8")
    min_fp16_tflops = forms.FloatField(required=False, min_value=0, label="Min dense FP16 TFLOPS")
    selection_policy = forms.ChoiceField(
        choices=SelectionPolicy.choices, initial=SelectionPolicy.CHEAPEST
    )
    allow_fallback = forms.BooleanField(
        required=False, initial=True, label="Fall back to other models"
    )
    priority = forms.ChoiceField(choices=[(p, p) for p in PRIORITY_BY_NAME], initial="normal")
    max_runtime_minutes = forms.IntegerField(min_value=1, initial=DEFAULT_MAX_RUNTIME_MINUTES)
    max_retry = forms.IntegerField(
        required=False,
        min_value=0,
        initial=DEFAULT_MAX_RETRY,
        label="Retries after eviction",
        help_text="Times the whole job is restarted when its pods are evicted (node lost, drained)",
    )
    port = forms.IntegerField(
        required=False, min_value=1024, max_value=65535, help_text="Inference only"
    )

    def __init__(self, *args: Any, teams: Iterable[Team], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [(t.slug, t.name) for t in teams]
        self.fields["team"].choices = choices
        if len(choices) == 1:
            self.fields["team"].initial = choices[0][0]

    def _split(self, name: str) -> list[str]:
        try:
            return shlex.split(self.cleaned_data.get(name) or "")
        except ValueError as exc:
            self.add_error(name, f"Cannot split this like a shell would: {exc}.")
            return []

    def _env(self) -> dict[str, str] | list[str]:
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

    def to_spec_data(self) -> dict[str, Any]:
        """The raw request ``parse_job_spec`` expects, built from cleaned data."""
        d = self.cleaned_data
        by_models = d.get("requirement") == "models"
        data: dict[str, Any] = {
            "team": d.get("team"),
            "name": d.get("name"),
            "kind": d.get("kind"),
            "image": d.get("image"),
            "command": self._split("command"),
            "args": self._split("args"),
            "env": self._env(),
            "replicas": d.get("replicas"),
            "gpus_per_replica": d.get("gpus_per_replica"),
            "cpu_per_replica": d.get("cpu_per_replica"),
            "memory_gib_per_replica": d.get("memory_gib_per_replica"),
            "selection_policy": d.get("selection_policy"),
            "allow_fallback": bool(d.get("allow_fallback")),
            "priority": d.get("priority"),
            "max_runtime_minutes": d.get("max_runtime_minutes"),
            "max_retry": d.get("max_retry"),
            "port": d.get("port"),
        }
        if by_models:
            data["gpu_models"] = [
                m.strip() for m in (d.get("gpu_models") or "").split(",") if m.strip()
            ]
        else:
            data.update(
                min_gpu_memory_gib=d.get("min_gpu_memory_gib"),
                requires_bf16=bool(d.get("requires_bf16")),
                requires_fp8=bool(d.get("requires_fp8")),
                min_fp16_tflops=d.get("min_fp16_tflops"),
            )
        return data

    def add_spec_errors(self, fields: dict[str, list[str]]) -> None:
        for name, messages in fields.items():
            target = name if name in self.fields else None
            for message in messages:
                self.add_error(target, message if target else f"{name}: {message}")
