"""Small per-process views of slow-changing tables, read on the hot path.

A submit checks the largest node, the pool's models and the teams' quota reach; each is a few
queries that change only when an admin edits the inventory or a quota. Reading them on every
request costs more than the rest of the check, so each process keeps a copy for a few seconds.

Three rules make that safe, and they live here once:

- inside a transaction the view is read fresh and never kept (a test's own rows, or rows a
  rollback will take back, must not outlive it);
- a save or delete of one of the named models in this process, or a migrate/flush, drops the
  copy at once, so an admin's change applies to the next request it serves;
- a read that started before such a drop is not kept after it (a generation counter), so a
  slow read cannot put back a view older than the change that dropped it.

Other processes see a change after at most ``seconds``; that is the bound each caller states.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from django.db import connection
from django.db.models import Model
from django.db.models.signals import post_delete, post_migrate, post_save

__all__ = ["ProcessView"]

T = TypeVar("T")


class ProcessView(Generic[T]):
    """``read()``'s value, kept per process for ``seconds`` (see the module's rules)."""

    def __init__(self, name: str, read: Callable[[], T], seconds: float) -> None:
        self.name = name
        self.seconds = seconds
        self._read = read
        self._kept: tuple[float, T] | None = None
        self._generation = 0
        self._lock = threading.Lock()

    def get(self) -> T:
        if connection.in_atomic_block:
            return self._read()
        now = time.monotonic()
        kept = self._kept
        if kept is None or now - kept[0] > self.seconds:
            generation = self._generation
            kept = (now, self._read())
            with self._lock:
                if generation == self._generation:
                    self._kept = kept
        return kept[1]

    def forget(self, **_signal: Any) -> None:
        """Drop the copy (also a signal receiver: it takes and ignores the signal's kwargs)."""
        with self._lock:
            self._generation += 1
            self._kept = None

    def forget_on(self, *models: type[Model] | str) -> ProcessView[T]:
        """Drop the copy whenever one of ``models`` (a class or ``"app.Model"``) is saved or
        deleted in this process, and on every migrate or flush."""
        # Receivers are told apart by their bound method (this view), so each view connects
        # once per model however often this is called, and two views never shadow each other.
        for model in models:
            for signal in (post_save, post_delete):
                signal.connect(self.forget, sender=model, weak=False)
        post_migrate.connect(self.forget, weak=False)
        return self
