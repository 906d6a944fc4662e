from django.contrib import admin

from scheduling.models import GpuModel


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin):
    list_display = [
        "key",
        "display_name",
        "memory_gib",
        "fp16_tflops",
        "bf16",
        "fp8",
        "resource_name",
        "cost_factor",
        "active",
    ]
    list_filter = ["vendor", "architecture", "active"]
    search_fields = ["key", "display_name"]
