"""Packaged configs, vendored CRDs and ``python -m kubesim``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from kubesim import ConfigError, load_config
from kubesim.config import build_nodes
from tests.kubesim.conftest import TINY

REPO = Path(__file__).resolve().parents[2]
SHARED_CRDS = REPO.parent / "shared" / "k8s-reference" / "crds" / "volcano-v1.15.1"


def test_small_config_is_a_mixed_a100_v100_t4_cluster():
    cfg = load_config("small")
    labels = {n["metadata"]["labels"].get("gpu-type") for n in build_nodes(cfg)}
    assert {"a100-80gb", "v100-32gb", "t4"} <= labels
    assert cfg.node_count == 10


def test_large_config_has_2000_plus_nodes_of_six_models():
    cfg = load_config("large")
    nodes = build_nodes(cfg)
    models = {n["metadata"]["labels"].get("gpu-type") for n in nodes} - {None}
    assert len(nodes) >= 2000
    assert len(models) == 6


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ({"nodePools": [{"name": "x", "count": 1, "colour": "red"}]}, "unknown key(s) colour"),
        (
            {"nodePools": [{"name": "x", "count": 1, "gpuModel": "b300", "gpus": 8}]},
            "unknown model 'b300'",
        ),
        ({"nodes": []}, "unknown top-level key(s) nodes"),
    ],
    ids=["unknown pool key", "unknown gpu model", "unknown top-level key"],
)
def test_config_errors_name_the_key(raw, text):
    with pytest.raises(ConfigError, match=text.replace("(", r"\(").replace(")", r"\)")):
        load_config(raw)


@pytest.mark.skipif(not SHARED_CRDS.is_dir(), reason="../shared/k8s-reference is not checked out")
@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "kubesim" / "crds").glob("*.yaml")))
def test_vendored_crds_are_byte_identical_to_the_reference(name):
    assert (REPO / "kubesim" / "crds" / name).read_bytes() == (SHARED_CRDS / name).read_bytes()


def test_all_three_crds_are_vendored():
    names = {p.name for p in (REPO / "kubesim" / "crds").glob("*.yaml")}
    assert names == {
        "batch.volcano.sh_jobs.yaml",
        "scheduling.volcano.sh_queues.yaml",
        "scheduling.volcano.sh_podgroups.yaml",
    }


def _run_cli(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    cfg = tmp_path / "cluster.yaml"
    cfg.write_text(yaml.safe_dump(TINY))
    kubeconfig = tmp_path / "out.yaml"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubesim",
            "--config",
            str(cfg),
            "--port",
            "0",
            "--kubeconfig",
            str(kubeconfig),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    return proc, first


def test_cli_prints_the_url_writes_a_kubeconfig_and_stops_on_ctrl_c(tmp_path):
    proc, first = _run_cli(tmp_path, "--clock-speed", "60")
    try:
        assert "serving at http" in first, first + (proc.stderr.read() if proc.poll() else "")
        url = first.rsplit(" ", 1)[-1].strip()
        assert url.startswith("https://127.0.0.1:")
        assert proc.stdout.readline().startswith("kubesim: kubeconfig written to")
        api = config.new_client_from_config(str(tmp_path / "out.yaml"))
        assert len(client.CoreV1Api(api).list_node().items) == 3
        api.close()
    finally:
        proc.send_signal(signal.SIGINT)
        out, _err = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "stopped" in out


def test_cli_reports_a_bad_config(tmp_path, capsys):
    from kubesim.__main__ import main

    assert main(["--config", str(tmp_path / "missing.yaml")]) == 2
    assert "no such config file" in capsys.readouterr().err


def test_cli_options_parse():
    from kubesim.__main__ import build_parser

    args = build_parser().parse_args(["--http", "--clock-speed", "60", "--port", "0"])
    assert (args.http, args.clock_speed, args.port, args.config) == (True, 60.0, 0, "small")
