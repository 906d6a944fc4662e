from django.contrib import admin

from clusters.models import Cluster


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "api_url", "state", "namespace"]
    list_filter = ["state"]
