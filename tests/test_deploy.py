"""The Kubernetes manifests under deploy/, validated offline: every core resource
against Kubernetes' own schema (kubernetes-validate, strict: no unknown field), the
HTTPRoute and the InferencePool against their CRDs' schemas (deploy/schemas), the
kustomization listing exactly the files there, and the pieces agreeing with each other
and with the gateway (names, selectors, ports, probes, the grace period past the drain)."""

from __future__ import annotations

import json
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
