#!/usr/bin/env bash
# Installs the Debian packages the test suite uses, if missing:
#   etcd-server   - a real etcd for the membership tests (started per test)
#   python3-torch - CPU torch for Debian's /usr/bin/python3, for the
#                   connector tests with real tensors (contrib/python)
#   gcc           - cgo for libdfkv.so and the C test program
#   libibverbs-dev - headers and library of the RDMA transport's cgo
#                   provider, so the "ibverbs" tag build compiles and vets
#                   (nothing here runs it: CI has no RDMA device)
#   python3-venv, python3-pip - the Python package is tested as installed
#                   (pip install ./contrib/python into a venv)
#   redis-server, memcached, iperf3, curl, fio - the peers, the loopback
#                   and disk ceilings of scripts/bench-vs-peers.sh,
#                   smoke-run by scripts/test.sh
#   openssl       - the openssl command, with which the contrib Python
#                   TLS tests make their CA and certificates
#   buildah, ca-certificates - scripts/build-image.sh builds the OCI image
#                   offline, with the host's CA bundle copied in
# Needs root (CI runs as root); prints what it does.
set -euo pipefail
need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || need+=(python3-torch)
command -v cc >/dev/null 2>&1 || need+=(gcc)
[ -e /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
# The contrib suite installs the Python package into a virtual environment.
/usr/bin/python3 -m venv --help >/dev/null 2>&1 || need+=(python3-venv)
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
[ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
for pair in redis-server:redis-server memcached:memcached iperf3:iperf3 curl:curl fio:fio openssl:openssl buildah:buildah; do
	command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
	echo "== installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# Debian starts etcd, redis and memcached as services on install; the
	# tests start their own, on ports they pick, and stop them by PID. A
	# policy-rc.d that refuses every start (exit 101) keeps the packages
	# from starting theirs, so nothing here ever has to stop a service by
	# name (which on a developer's machine would stop their own). It is
	# removed again afterwards, unless one was there before.
	policy=/usr/sbin/policy-rc.d
	made_policy=
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod +x "$policy"
		made_policy=1
		trap 'rm -f "$policy"' EXIT
	fi
	apt-get update -qq
	apt-get install -y -qq "${need[@]}" >/dev/null
	if [ -n "$made_policy" ]; then
		rm -f "$policy"
		trap - EXIT
	fi
fi
echo "== etcd: $(etcd --version 2>/dev/null | head -1)"
echo "== torch for /usr/bin/python3: $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)"
