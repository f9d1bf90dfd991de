#!/usr/bin/env bash
# Installs Debian's prometheus package (server + promtool), victoria-metrics (the single-node
# server of the fleet tests, and vmagent, which checks the Kubernetes scrape config: promtool lacks
# kubernetes_sd_configs) and tmux when they are missing and we may install. Integration tests start their own servers on free loopback ports;
# nothing is started here.
set -u
missing=()
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  missing+=(prometheus)
fi
if ! command -v vmagent >/dev/null 2>&1 && [ ! -x /usr/bin/vmagent ]; then
  missing+=(victoria-metrics)
fi
# tmux drives the installed neuron-top in a real terminal in the slow tests.
if ! command -v tmux >/dev/null 2>&1; then
  missing+=(tmux)
fi
if [ "${#missing[@]}" = 0 ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's ${missing[*]} package(s) for the integration tests" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || echo "warning: could not install ${missing[*]}; their tests will be skipped" >&2
  # The packages' own services are not wanted: tests run their own servers on free ports.
  for service in prometheus victoria-metrics; do
    (service "$service" stop || systemctl stop "$service") >/dev/null 2>&1 || true
  done
else
  echo "note: ${missing[*]} not found; their tests will be skipped (install Debian's ${missing[*]})" >&2
fi
exit 0
