"""docker/raycluster.yaml, read as KubeRay would (no Kubernetes here): what it starts and configures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import ray
import yaml

from server.cli import add_serve_parser
from server.config import ENV_PREFIX, FIELDS

MANIFEST = Path(__file__).resolve().parents[3] / "docker" / "raycluster.yaml"


def _documents() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFEST.read_text())}


def _settings_env(container: dict) -> set[str]:
    names = {e["name"] for e in container.get("env", [])}
    fields = {ENV_PREFIX + f.upper() for f in FIELDS}
    assert names <= fields, f"not settings: {names - fields}"
    return names


def test_the_head_runs_the_gateway_and_the_workers_offer_the_avatar_resource():
    docs = _documents()
    cluster = docs["RayCluster"]
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["spec"]["rayVersion"] == ray.__version__
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    gateway = next(c for c in head["template"]["spec"]["containers"] if c["name"] == "gateway")
    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(gateway["command"][1:])
    assert args.command == "serve" and args.ray == "127.0.0.1:6379"
    assert {"AVATAR_AUTH_TOKEN", "AVATAR_HOST"} <= _settings_env(gateway)
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/healthz"

    (group,) = cluster["spec"]["workerGroupSpecs"]
    assert json.loads(json.loads(group["rayStartParams"]["resources"])) == {"avatar": 1}
    worker = group["template"]["spec"]
    assert worker["hostNetwork"] is True
    (container,) = worker["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == group["rayStartParams"]["num-gpus"]
    assert {"AVATAR_PUBLIC_ADDRESS", "AVATAR_ICE_PORTS", "AVATAR_AUTH_TOKEN"} <= _settings_env(container)

    service = docs["Service"]
    assert service["spec"]["selector"] == {"ray.io/cluster": cluster["metadata"]["name"], "ray.io/node-type": "head"}
    assert service["spec"]["ports"][0]["targetPort"] == gateway["ports"][0]["containerPort"]
