"""Helm's own engine for the chart tests (tests/it/helm_chart.rs), through the helm-python-sdk wheel (Helm's Go SDK
behind a C ABI: `helm template` and `helm lint` without the binary). tests/install-deps.sh installs it in a virtual
environment of the tests' own; docs/development/testing.md says why it is trusted.

    render.py [--package DIR] CHART RELEASE NAMESPACE [VALUES.yaml ...]

prints one JSON object: "manifests" (every rendered template, by path, as `helm template` renders them), "notes",
"lint" (`helm lint --strict` with the same values), or "error" (the values refused, e.g. by values.schema.json, or a
template that fails). Values files merge in order, as `helm -f a.yaml -f b.yaml` merges them. With --package, the
chart is first packaged into DIR (`helm package`) and the archive rendered, as a release's chart would be.
"""
import json
import sys

import helm_python as helm


def merged(base, over):
    """`over` on `base` as Helm merges values files: maps key by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def main():
    args = sys.argv[1:]
    package = None
    if args[0] == "--package":
        package, args = args[1], args[2:]
    chart, release, namespace, *files = args
    if package:
        chart = helm.package(chart, destination=package)
    values = {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            values = merged(values, helm.values_from_yaml(f.read()) or {})
    try:
        with helm.Chart.load(chart) as c:
            rendered = c.render(values, name=release, namespace=namespace, is_install=True)
    except helm.HelmError as e:
        print(json.dumps({"error": str(e)}))
        return
    notes = {k: v for k, v in rendered.items() if k.endswith("NOTES.txt")}
    manifests = {k: v for k, v in rendered.items() if not k.endswith("NOTES.txt")}
    lint = helm.lint(chart, values, strict=True, namespace=namespace)
    print(json.dumps({"manifests": manifests, "notes": "".join(notes.values()), "lint": lint}))


main()
