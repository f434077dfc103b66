#!/usr/bin/env bash
# What the end-to-end tests run beside the code, installed when missing (Debian and Ubuntu; `.ci/run` calls this):
# a real Prometheus (and promtool), Alertmanager, an SMTP server (aiosmtpd), a browser (chromium), kill(1),
# script(1) for a pseudo-terminal, and kubectl. An existing kubectl is left alone, whichever package brought it.
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

if [ ${#need[@]} -eq 0 ]; then
  echo "test dependencies: all present"
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
