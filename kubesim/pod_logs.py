"""The simulated kubelet's container logs, as a mixin: a few plausible lines derived from the
container's simulated run (start, steps of a fake loss curve, the exit), or what ``nvidia-smi``
would print.
"""

from __future__ import annotations

import random
from typing import Any

from kubesim.clock import rfc3339_micro
from kubesim.gpuinfo import is_nvidia_smi, nvidia_smi
from kubesim.objects import LOG_LINES, annotation_float
from kubesim.runtime import PodRuntime


class PodLogs:
    """Log methods of :class:`kubesim.sim.Simulation`.

    A mixin: it relies on the simulation's store, types, settings and clock; split out only to
    keep each concern readable.
    """

    def pod_log(
        self,
        pod: PodRuntime,
        obj: dict[str, Any],
        container: str,
        *,
        previous: bool = False,
        timestamps: bool = False,
        since: float | None = None,
    ) -> list[str]:
        """A few plausible log lines for the container, derived from its simulated run; with
        ``since`` (simulated epoch seconds) only those written at or after it, as the kubelet
        answers ``sinceSeconds`` / ``sinceTime``."""
        annotations = obj["metadata"].get("annotations") or {}
        limit = int(annotation_float(annotations, LOG_LINES) or 40)
        runs: list[tuple[float, float | None, int | None, str | None]]
        if previous:
            runs = pod.history[-1:] if pod.restarts else []
        elif pod.state == "running" and pod.started_at is not None:
            runs = [(pod.started_at, None, None, None)]
        else:
            runs = pod.history[-1:]
        if not runs:
            return []
        start, end, code, reason = runs[0]
        end_time = end if end is not None else self.now()
        node = self.store.get(self.types.nodes, "", pod.node or "")
        spec = next(
            (c for c in obj["spec"].get("containers") or [] if c.get("name") == container), {}
        )
        if is_nvidia_smi(spec):
            printed = [
                (start, text)
                for text in nvidia_smi(node or {"metadata": {"name": ""}}, pod.devices, spec)
            ]
            if since is not None:
                printed = [(t, text) for t, text in printed if t >= since - 5e-7]
            if timestamps:
                return [f"{rfc3339_micro(t)} {text}" for t, text in printed]
            return [text for _, text in printed]
        labels = (node or {}).get("metadata", {}).get("labels") or {}
        product = labels.get("nvidia.com/gpu.product", "no GPU")
        gpus = sum(v for k, v in pod.req.items() if k.startswith(("nvidia.com/", "amd.com/")))
        interval = max(self.settings.log_line_interval_seconds, 0.001)
        lines = [
            (
                start,
                f"kubesim: container {container} started on {pod.node} "
                f"({gpus // 1000} x {product})",
            ),
            (start, f"task {pod.task} index {pod.index}, job {pod.job.key[1] if pod.job else '-'}"),
        ]
        steps = int((end_time - start) // interval)
        rng = random.Random(f"{pod.uid}-{len(pod.history)}")  # noqa: S311 - fake loss curve
        loss = 2.5 + rng.random()
        for step in range(1, steps + 1):
            loss *= 0.97 + rng.random() * 0.02
            lines.append(
                (
                    start + step * interval,
                    f"step {step}: loss={loss:.4f} throughput={900 + rng.randint(0, 200)} "
                    "samples/s",
                )
            )
        if end is not None:
            if code == 0:
                lines.append((end, "training finished, saving checkpoint; exit 0"))
            elif reason == "OOMKilled":
                lines.append((end, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"))
            else:
                lines.append((end, f"error: process exited with code {code}"))
        if len(lines) > limit:
            lines = lines[:2] + lines[-(limit - 2) :]
        if since is not None:
            # Stamps are printed to the microsecond: a line's own printed stamp must select it,
            # whichever way its float time rounded.
            lines = [(t, text) for t, text in lines if t >= since - 5e-7]
        if timestamps:
            return [f"{rfc3339_micro(t)} {text}" for t, text in lines]
        return [text for _, text in lines]
