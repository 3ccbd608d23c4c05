"""deploy/k8s: schema-valid (kubernetes-validate --strict, pinned Kubernetes), and the numbers
in it agree with the server's own defaults and metrics.

Validation: every file of the base and the overlay's patches alone, plus the overlay rendered
by ``kustomize_lite`` (kubectl is not available here) and validated document by document.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from openhood.server.config import ServerConfig

from .kustomize_lite import render

kubernetes_validate = pytest.importorskip("kubernetes_validate")

K8S_VERSION = "1.31.0"  # oldest version we promise; its schema has the native preStop sleep
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
BASE, OVERLAY = DEPLOY / "base", DEPLOY / "overlays" / "example"
DRAIN_MARGIN_S = 5  # model release and process exit after the drain


def by_kind(docs):
    return {d["kind"]: d for d in docs}


def container(docs):
    (c,) = by_kind(docs)["Deployment"]["spec"]["template"]["spec"]["containers"]
    return c


def test_base_files_pass_strict_validation_with_the_cli():
    files = sorted(str(p) for p in BASE.glob("*.yaml") if p.name != "kustomization.yaml")
    out = subprocess.run(
        [str(Path(sys.executable).with_name("kubernetes-validate")), "--strict", "-k", K8S_VERSION, *files],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("passed") == len(files) == 4


@pytest.mark.parametrize("directory", [BASE, OVERLAY], ids=["base", "overlay"])
def test_rendered_kustomization_is_valid(directory):
    docs = render(directory)
    assert set(by_kind(docs)) == {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"}
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_strict_validation_can_fail():
    doc = copy.deepcopy(by_kind(render(BASE))["Deployment"])
    doc["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/health/ready"}}  # typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_overlay_applies_its_patches():
    docs = by_kind(render(OVERLAY))
    c = container(render(OVERLAY))
    assert all(d["metadata"]["namespace"] == "embeddings" for d in docs.values())
    assert c["image"] == "registry.example.com/ml/openhood:0.1.0"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["OPENHOOD_WORKERS"] == "4" and env["OPENHOOD_THREADS"] == "1" and "OPENHOOD_API_KEY" in env
    assert c["resources"]["requests"]["cpu"] == "4" and docs["HorizontalPodAutoscaler"]["spec"]["maxReplicas"] == 30
    assert c["readinessProbe"]["httpGet"]["path"] == "/health/ready"  # untouched by the patch


@pytest.mark.parametrize("directory", [BASE, OVERLAY], ids=["base", "overlay"])
def test_termination_grace_covers_prestop_drain_and_margin(directory):
    defaults = ServerConfig()
    docs = render(directory)
    pod = by_kind(docs)["Deployment"]["spec"]["template"]["spec"]
    c = container(docs)
    pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop >= 5  # long enough for endpoint removal to reach kube-proxy and ingresses
    assert pod["terminationGracePeriodSeconds"] >= pre_stop + defaults.grace_period_s + DRAIN_MARGIN_S
    env = {e["name"]: e.get("value") for e in c["env"]}
    if "OPENHOOD_GRACE_PERIOD" in env:  # an override must still fit
        assert pod["terminationGracePeriodSeconds"] >= pre_stop + float(env["OPENHOOD_GRACE_PERIOD"]) + DRAIN_MARGIN_S
    # The readiness probe runs a real inference bounded by health_timeout_s: the kubelet must wait longer.
    assert c["readinessProbe"]["timeoutSeconds"] > defaults.health_timeout_s
    assert c["startupProbe"]["httpGet"]["path"] == c["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health/live"


def test_pod_hardening_shm_and_secret():
    docs = render(BASE)
    pod = by_kind(docs)["Deployment"]["spec"]["template"]["spec"]
    c = container(docs)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    shm = next(m for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm")
    assert volumes[shm["name"]]["emptyDir"]["medium"] == "Memory" and volumes[shm["name"]]["emptyDir"]["sizeLimit"]
    key = next(e for e in c["env"] if e["name"] == "OPENHOOD_API_KEY")
    assert "secretKeyRef" in key["valueFrom"] and "value" not in key
    assert {"requests", "limits"} <= set(c["resources"])


def test_hpa_scales_on_a_metric_the_server_exports():
    from openhood.server.metrics import ServerMetrics

    hpa = by_kind(render(BASE))["HorizontalPodAutoscaler"]
    (metric,) = hpa["spec"]["metrics"]
    name = metric["pods"]["metric"]["name"]
    metrics = ServerMetrics()
    metrics.for_model("a", lambda: 3)
    metrics.for_model("b", lambda: 4)
    exported = metrics.exposition().decode()
    assert f'\n{name}{{model="a"}} 3.0' in exported and f'\n{name}{{model="b"}} 4.0' in exported  # per model
    # The adapter sums the models of a pod: the HPA sees one series per pod.
    rules = yaml.safe_load((DEPLOY / "prometheus-adapter-values.yaml").read_text())["rules"]["custom"]
    assert any(
        name in r["seriesQuery"]
        and r["name"]["as"] == name
        and "sum(" in r["metricsQuery"]
        and "by (<<.GroupBy>>)" in r["metricsQuery"]
        for r in rules
    )
    annotations = by_kind(render(BASE))["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] == "/metrics"
    assert annotations["prometheus.io/port"] == str(container(render(BASE))["ports"][0]["containerPort"])
