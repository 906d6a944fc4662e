"""The per-process views the submit path reads (portal/cache.py): kept between requests, read
fresh inside a transaction, and dropped at once when a named model is saved or deleted."""

import pytest

from portal.cache import ProcessView
from portal.models import Team

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def team_count():
    view = ProcessView("test_team_count", lambda: Team.objects.count(), seconds=60).forget_on(Team)
    yield view
    view.forget()


def test_a_view_is_kept_until_a_named_model_is_saved(team_count):
    before = team_count.get()
    Team.objects.bulk_create([Team(slug="quiet", name="Quiet")])  # no signal: not seen
    assert team_count.get() == before
    Team.objects.create(slug="loud", name="Loud")  # post_save: dropped
    assert team_count.get() == before + 2


def test_a_delete_drops_the_view(team_count):
    team = Team.objects.create(slug="gone", name="Gone")
    seen = team_count.get()
    team.delete()
    assert team_count.get() == seen - 1


def test_inside_a_transaction_the_view_is_read_fresh_and_not_kept(team_count):
    from django.db import transaction

    before = team_count.get()
    with transaction.atomic():
        Team.objects.bulk_create([Team(slug="inside", name="Inside")])
        assert team_count.get() == before + 1
        transaction.set_rollback(True)
    assert team_count.get() == before
