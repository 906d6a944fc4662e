"""The portal's own cluster registration form (platform admins)."""

from __future__ import annotations

from django import forms


class ClusterRegisterForm(forms.Form):
    """A kubeconfig (uploaded or pasted), or the API URL, a token and the CA; and the few
    options a new cluster needs. The token is rendered back into its field after a failed
    save (``render_value``): what the admin typed is never lost. A chosen file cannot be
    put back by any page (browsers forbid it), which the page then says."""

    name = forms.SlugField(
        max_length=63, help_text="A DNS label: lower-case letters, digits and '-'."
    )
    kubeconfig_file = forms.FileField(
        required=False,
        label="Kubeconfig file",
        help_text="Self-contained: one cluster, user and context, the CA and a token or client "
        "certificate inline.",
    )
    kubeconfig_text = forms.CharField(
        required=False,
        label="…or paste the kubeconfig",
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
    )
    api_url = forms.CharField(
        required=False, label="…or the API URL", help_text="https://, without a kubeconfig"
    )
    token = forms.CharField(
        required=False,
        label="Bearer token",
        widget=forms.PasswordInput(render_value=True, attrs={"autocomplete": "off"}),
    )
    ca_pem = forms.CharField(
        required=False,
        label="CA certificate (PEM)",
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
    )
    namespace = forms.CharField(
        required=False,
        max_length=63,
        help_text="Namespace for jobs (empty: the kubeconfig's, or gpupool)",
    )
    namespace_per_team = forms.BooleanField(
        required=False, label="One namespace per team (gp-<team>)"
    )
    gpu_label = forms.CharField(
        required=False,
        max_length=253,
        help_text="Node label naming the GPU model (empty: gpu-type)",
    )
    prometheus_url = forms.CharField(
        required=False, label="Prometheus URL", help_text="DCGM metrics (optional)"
    )
    enable = forms.BooleanField(
        required=False,
        initial=False,
        label="Enable at once (otherwise it is registered disabled, to test first)",
    )
