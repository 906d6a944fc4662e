"""REST for notification preferences, the delivery log and team webhooks (thin views)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from notifications.models import Channel, Delivery, TeamWebhook
from notifications.preferences import preferences_of, preferences_set
from notifications.webhooks import team_for_webhooks, webhook_create, webhook_delete, webhooks_of
from portal.api.body import request_object
from portal.api.parsers import StrictJSONParser


class PreferencesSerializer(serializers.Serializer):
    events = serializers.DictField(
        child=serializers.ListField(child=serializers.ChoiceField(choices=[Channel.EMAIL.value])),
        help_text='Event kind → channels beyond the in-portal list, e.g. {"job.failed": ["email"]}',
    )
    wait_threshold_minutes = serializers.IntegerField(
        allow_null=True, min_value=1, help_text="Tell me when a job of mine waits longer"
    )


class PreferencesUpdateSerializer(serializers.Serializer):
    events = serializers.DictField(
        child=serializers.ListField(child=serializers.ChoiceField(choices=[Channel.EMAIL.value])),
        required=False,
    )
    wait_threshold_minutes = serializers.IntegerField(
        allow_null=True, min_value=1, max_value=43200, required=False
    )


class PreferencesView(APIView):
    """Your notification preferences: for each event, the channels beyond the in-portal list.

    JSON only: ``events`` is a map of lists, which a form body cannot say, and an empty form
    read as "change nothing" would answer 200 to a body that meant something else."""

    parser_classes = [StrictJSONParser]

    @extend_schema(responses=PreferencesSerializer)
    def get(self, request: Request) -> Response:
        return Response(preferences_of(request.user.pk).as_dict())

    @extend_schema(request=PreferencesUpdateSerializer, responses=PreferencesSerializer)
    def put(self, request: Request) -> Response:
        """Change the fields given (an event left out keeps its channels)."""
        prefs = preferences_set(user=request.user, data=request_object(request))
        return Response(prefs.as_dict())


class DeliverySerializer(serializers.ModelSerializer):
    kind = serializers.CharField(source="notification.kind", read_only=True)
    title = serializers.CharField(source="notification.title", read_only=True)
    webhook = serializers.CharField(
        source="webhook.name", default=None, read_only=True, allow_null=True
    )
    last_error = serializers.CharField(
        read_only=True,
        help_text='The last failure as a category ("connection refused", "HTTP 500"), never '
        "the remote's words; empty if none",
    )
    idempotency_key = serializers.UUIDField(
        source="key",
        read_only=True,
        help_text="The same on every try: a webhook's Idempotency-Key, an e-mail's Message-ID "
        "(<key@host>)",
    )
    retried_after_interruption = serializers.BooleanField(
        read_only=True,
        help_text="A worker stopped while sending it, and it was sent again with the same "
        "idempotency key (it may have arrived twice); retries_in_doubt counts those",
    )

    class Meta:
        model = Delivery
        fields = [
            "id",
            "notification",
            "kind",
            "title",
            "channel",
            "webhook",
            "state",
            "attempts",
            "idempotency_key",
            "retries_in_doubt",
            "retried_after_interruption",
            "error",
            "error_status",
            "last_error",
            "created_at",
            "next_attempt_at",
            "sent_at",
        ]
        read_only_fields = fields


class DeliveryListView(generics.ListAPIView):
    """Your delivery log, newest first: each message sent (or not) for your notifications,
    with the last error."""

    serializer_class = DeliverySerializer
    filter_backends: list[Any] = []

    def get_queryset(self) -> Any:
        return Delivery.objects.filter(user_id=self.request.user.pk).select_related(
            "notification", "webhook"
        )


class WebhookSerializer(serializers.ModelSerializer):
    class Meta:
        model = TeamWebhook
        fields = ["id", "name", "url", "format", "events", "secret_hint", "active", "created_at"]
        read_only_fields = fields


class WebhookCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    url = serializers.CharField(max_length=2048, help_text="https only; checked like clusters'")
    format = serializers.ChoiceField(choices=["webhook", "slack"], required=False)
    events = serializers.ListField(child=serializers.CharField(), required=False)


CREATED = inline_serializer(
    "TeamWebhookCreated",
    {
        "webhook": WebhookSerializer(),
        "secret": serializers.CharField(help_text="The signing secret: shown this once"),
    },
)


class TeamWebhookListView(APIView):
    """A team's webhooks (team admins and platform admins)."""

    @extend_schema(responses=WebhookSerializer(many=True))
    def get(self, request: Request, team: str) -> Response:
        found = team_for_webhooks(request.user, team)
        return Response(WebhookSerializer(webhooks_of(found), many=True).data)

    @extend_schema(request=WebhookCreateSerializer, responses={201: CREATED})
    def post(self, request: Request, team: str) -> Response:
        """Add a webhook; the answer carries its signing secret, shown this once."""
        found = team_for_webhooks(request.user, team)
        body = request_object(request)
        hook, secret = webhook_create(
            team=found,
            by=request.user,
            name=body.get("name"),
            url=body.get("url"),
            format=body.get("format"),
            events=body.get("events"),
        )
        return Response(
            {"webhook": WebhookSerializer(hook).data, "secret": secret},
            status=status.HTTP_201_CREATED,
        )


class TeamWebhookDetailView(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request: Request, team: str, webhook_id: int) -> Response:
        found = team_for_webhooks(request.user, team)
        webhook_delete(team=found, webhook_id=webhook_id, by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
