"""REST for the in-portal notifications: your own, newest first; mark them read."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.body import request_object
from portal.api.query import FlagField, query_params
from portal.api.serializers import NotificationReadSerializer, NotificationSerializer
from portal.errors import ApplicationError
from portal.notifications import notifications_mark_read, notifications_of, unread_count


class NotificationQuery(serializers.Serializer):
    unread = FlagField(required=False, help_text="Unread ones only")


class NotificationListView(generics.ListAPIView):
    """Your notifications, newest first: your jobs' state changes you did not make."""

    serializer_class = NotificationSerializer
    filter_backends: list[Any] = []

    @extend_schema(parameters=[NotificationQuery])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> Any:
        query = query_params(NotificationQuery, self.request)
        rows = notifications_of(self.request.user).select_related("event")
        if query.get("unread"):
            rows = rows.filter(read_at__isnull=True)
        return rows


READ_RESULT = inline_serializer(
    "NotificationsRead",
    {"marked": serializers.IntegerField(), "unread": serializers.IntegerField()},
)


class NotificationReadView(APIView):
    """Mark notifications read: the ones named, or all."""

    @extend_schema(request=NotificationReadSerializer, responses={200: READ_RESULT})
    def post(self, request: Request) -> Response:
        ids = request_object(request).get("ids")
        if ids is not None and (
            not isinstance(ids, list) or not all(type(i) is int for i in ids) or len(ids) > 500
        ):
            raise ApplicationError(
                "Invalid notification ids.", fields={"ids": ["A list of at most 500 ids."]}
            )
        marked = notifications_mark_read(user=request.user, ids=ids)
        return Response({"marked": marked, "unread": unread_count(request.user)})
