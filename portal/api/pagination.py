"""Cursor pagination on the primary key: constant cost per page however many jobs exist."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class JobCursorPagination(CursorPagination):
    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class EventCursorPagination(CursorPagination):
    ordering = ("created_at", "id")
    page_size = 200
    page_size_query_param = "page_size"
    max_page_size = 1000
