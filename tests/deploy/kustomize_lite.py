"""Render a kustomization offline: the small subset deploy/k8s uses, and nothing else.

`kubectl kustomize` is not available in the test environment, so this renders base + overlay
itself: ``resources`` (files or directories with their own kustomization), ``namespace``,
``labels`` (metadata labels only, no selectors), ``images`` (newName / newTag) and ``patches``
given by ``path`` (strategic merge: maps merge, lists of containers / env / volumes / ports
merge by their key). Any other key is refused, so the test fails instead of rendering
something kustomize would render differently.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "namespace", "labels", "images", "patches"}
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}


def render(directory: Path) -> list[dict]:
    directory = Path(directory)
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(spec) - SUPPORTED
    if unknown:
        raise ValueError(f"{directory}: kustomization keys {sorted(unknown)} are not supported by this renderer")
    docs: list[dict] = []
    for res in spec.get("resources", []):
        path = directory / res
        docs += render(path) if path.is_dir() else [d for d in yaml.safe_load_all(path.read_text()) if d]
    for patch_ref in spec.get("patches", []):
        if set(patch_ref) != {"path"}:
            raise ValueError(f"only file patches are supported, got {patch_ref}")
        patch = yaml.safe_load((directory / patch_ref["path"]).read_text())
        target = [d for d in docs if d["kind"] == patch["kind"] and d["metadata"]["name"] == patch["metadata"]["name"]]
        if len(target) != 1:
            raise ValueError(f"patch {patch_ref['path']} matches {len(target)} resources")
        merged = merge(target[0], patch)
        docs[docs.index(target[0])] = merged
    for entry in spec.get("labels", []):
        if set(entry) - {"pairs"}:
            raise ValueError(f"only plain label pairs are supported, got {entry}")
        for d in docs:
            d["metadata"].setdefault("labels", {}).update(entry["pairs"])
    if "namespace" in spec:
        for d in docs:
            if d["kind"] not in CLUSTER_SCOPED:
                d["metadata"]["namespace"] = spec["namespace"]
    for image in spec.get("images", []):
        for d in docs:
            for container in _containers(d):
                name, _, tag = container["image"].partition(":")
                if name == image["name"]:
                    container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"
    return docs


def merge(base, patch, key: str | None = None):
    """Strategic merge of ``patch`` into a copy of ``base``."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for k, v in patch.items():
            out[k] = merge(out[k], v, k) if k in out else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        field = MERGE_KEYS[key]
        out = copy.deepcopy(base)
        for item in patch:
            match = [i for i, b in enumerate(out) if b.get(field) == item.get(field)]
            if match:
                out[match[0]] = merge(out[match[0]], item)
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def _containers(doc: dict):
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return [*spec.get("initContainers", []), *spec.get("containers", [])]
