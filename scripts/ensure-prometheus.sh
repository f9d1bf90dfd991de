#!/usr/bin/env bash
# Installs Debian's prometheus package (server + promtool) when it is missing and we may install.
# Integration tests start their own Prometheus on free loopback ports; nothing is started here.
set -u
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's prometheus package for the integration tests" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
    || echo "warning: could not install prometheus; its integration tests will be skipped" >&2
  # The package's own service is not wanted: tests run their own server on a free port.
  (service prometheus stop || systemctl stop prometheus) >/dev/null 2>&1 || true
else
  echo "note: prometheus not found; its integration tests will be skipped (install Debian's 'prometheus')" >&2
fi
exit 0
