#!/usr/bin/env bash
# What the end-to-end tests run beside the code, installed when missing (Debian and Ubuntu; `.ci/run` calls this):
# a real Prometheus (and promtool), Alertmanager, an SMTP server (aiosmtpd), a browser (chromium), kill(1),
# script(1) for a pseudo-terminal, kubectl, and Helm's engine for the chart (the helm-python-sdk wheel, in a virtual
# environment of the tests' own). An existing kubectl is left alone, whichever package brought it.
# Works as root or through sudo; installs nothing when everything is there.
set -euo pipefail

need=()
has() { command -v "$1" >/dev/null 2>&1; }
has prometheus || [ -x /usr/bin/prometheus ] || need+=(prometheus)
has prometheus-alertmanager || [ -x /usr/bin/prometheus-alertmanager ] || need+=(prometheus-alertmanager)
/usr/bin/python3 -c 'import aiosmtpd' 2>/dev/null || need+=(python3-aiosmtpd)
# `check --output table` is tested on a pseudo-terminal with script(1) (util-linux; bsdutils on Debian 12).
has script || need+=(bsdutils)
# The status page is tested in a real headless browser.
has chromium || [ -x /usr/bin/chromium ] || need+=(chromium)
# The daemon's reload and stop are tested by signalling the real binary with kill(1).
[ -x /bin/kill ] || [ -x /usr/bin/kill ] || need+=(procps)
# The deployment test renders deploy/ with `kubectl kustomize`. Debian's kubectl is in kubernetes-client, which
# clashes with the kubectl package of Kubernetes' own repository: only when there is no kubectl at all.
has kubectl || [ -x /usr/bin/kubectl ] || [ -x /usr/local/bin/kubectl ] || need+=(kubernetes-client)
# The chart's venv is made with Debian's python3 (3.10+ for the wheel), whose venv module needs ensurepip.
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)

# Helm's own engine renders and lints the chart (tests/it/helm_chart.rs): the helm-python-sdk wheel, Helm's Go SDK
# behind a C ABI, pinned by version and hash (tests/helm/requirements.txt; docs/development/testing.md says why it is
# trusted), in a virtual environment of the tests' own, where the tests look for it.
helm_venv="${APF_MONITOR_HELM_VENV:-}"
# (~ is the user's home even where HOME is not set.)
[ -n "$helm_venv" ] || helm_venv=~/.cache/apf-monitor-tests/helm-venv
helm_engine() {
  if "$helm_venv/bin/python" -c 'import helm_python' 2>/dev/null; then
    return
  fi
  echo "test dependencies: Helm's engine (helm-python-sdk) into $helm_venv"
  rm -rf "$helm_venv"
  mkdir -p "$(dirname "$helm_venv")"
  /usr/bin/python3 -m venv "$helm_venv"
  "$helm_venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes \
    -r "$(dirname "$0")/helm/requirements.txt"
}

if [ ${#need[@]} -eq 0 ]; then
  echo "test dependencies: all present"
  helm_engine
  exit 0
fi
echo "test dependencies: installing ${need[*]}"
if ! has apt-get; then
  echo "no apt-get here: install these packages (or their equivalents) by hand: ${need[*]}" >&2
  exit 1
fi
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if ! has sudo; then
    echo "not root and no sudo: as root, run: apt-get install -y --no-install-recommends ${need[*]}" >&2
    exit 1
  fi
  SUDO=(sudo)
fi
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
helm_engine
