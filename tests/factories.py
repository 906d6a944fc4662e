"""factory_boy factories for the portal's domain."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from portal.models import Job, JobState, Membership, Role, Team


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw-for-tests")


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    name = factory.Sequence(lambda n: f"Team {n}")
    slug = factory.Sequence(lambda n: f"team-{n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = Role.MEMBER


class JobFactory(factory.django.DjangoModelFactory):
    """A queued job as ``job_submit`` would create it (use the service to test submission)."""

    class Meta:
        model = Job

    team = factory.SubFactory(TeamFactory)
    owner = factory.SubFactory(UserFactory)
    name = factory.Sequence(lambda n: f"job-{n}")
    image = "nvcr.io/nvidia/pytorch:24.05-py3"
    command = ["python", "train.py"]
    replicas = 1
    gpus_per_replica = 1
    cpu_millicores = 4000
    memory_mib = 16384
    max_runtime_seconds = 3600
    state = JobState.QUEUED
    state_changed_at = factory.LazyFunction(timezone.now)
    submitted_at = factory.LazyFunction(timezone.now)
