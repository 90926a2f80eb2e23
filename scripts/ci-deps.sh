#!/usr/bin/env bash
# Installs the Debian packages the test suite uses, if missing:
#   etcd-server  - a real etcd for the membership tests (started per test)
# Needs root (CI runs as root); prints what it does.
set -euo pipefail
need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
if [ ${#need[@]} -gt 0 ]; then
	echo "== installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${need[@]}" >/dev/null
	# Debian starts etcd as a service on install; the tests start their own.
	if command -v systemctl >/dev/null 2>&1; then systemctl stop etcd 2>/dev/null || true; fi
	pkill -x etcd 2>/dev/null || true
fi
echo "== etcd: $(etcd --version 2>/dev/null | head -1)"
