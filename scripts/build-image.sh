#!/usr/bin/env bash
# build-image.sh: an OCI image of the dfkv binary, built offline with
# buildah (Debian's package; no registry, no base image to download).
#
#   scripts/build-image.sh [TAG]        # default dfkv:<version>
#
# The image holds the static binary (CGO_ENABLED=0; every role by
# subcommand, exactly what the README builds), the host's CA bundle (for
# TLS to nodes, the MDS and S3) and an /etc/passwd with the user dfkv
# (65532), which the image runs as. /var/lib/dfkv is a volume and the
# working directory; the environment points the node's disk and the MDS's
# bbolt file there and listens on all addresses, as a container must.
# The version is DFKV_VERSION or `git describe`; the commit is HEAD's.
# DFKV_IMAGE_STORAGE=DIR keeps buildah's storage in DIR instead of the
# system's (the tests use a temporary one).
set -euo pipefail
cd "$(dirname "$0")/.."
version="${DFKV_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
tag="${1:-dfkv:${version}}"
bah=(buildah)
if [ -n "${DFKV_IMAGE_STORAGE:-}" ]; then
	bah+=(--root "$DFKV_IMAGE_STORAGE/root" --runroot "$DFKV_IMAGE_STORAGE/run" --storage-driver vfs)
fi
command -v buildah >/dev/null || { echo "build-image.sh: buildah is missing (apt-get install buildah)" >&2; exit 1; }
ca=/etc/ssl/certs/ca-certificates.crt
[ -r "$ca" ] || { echo "build-image.sh: no CA bundle at $ca (apt-get install ca-certificates)" >&2; exit 1; }

work=$(mktemp -d)
ctr=
cleanup() {
	[ -z "$ctr" ] || "${bah[@]}" rm "$ctr" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
root="$work/rootfs"
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/var/lib/dfkv" "$root/tmp"
echo "== building the static binary ($version, $commit)"
CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X github.com/dfkv/dfkv/roles/version.Version=$version -X github.com/dfkv/dfkv/roles/version.Commit=$commit" \
	-o "$root/usr/local/bin/dfkv" .
cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\ndfkv:x:65532:65532:dfkv:/var/lib/dfkv:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\ndfkv:x:65532:\n' >"$root/etc/group"
chmod 1777 "$root/tmp"

echo "== assembling $tag"
ctr=$("${bah[@]}" from scratch)
"${bah[@]}" copy "$ctr" "$root" / >/dev/null
"${bah[@]}" copy --chown 65532:65532 "$ctr" "$root/var/lib/dfkv" /var/lib/dfkv >/dev/null
"${bah[@]}" config \
	--entrypoint '["/usr/local/bin/dfkv"]' --cmd server \
	--user 65532:65532 --workingdir /var/lib/dfkv --volume /var/lib/dfkv \
	--port 7600/tcp --port 7680/tcp --port 7700/tcp --port 7780/tcp \
	--env DFKV_SERVER_LISTEN=0.0.0.0:7600 --env DFKV_SERVER_HTTP_LISTEN=0.0.0.0:7680 \
	--env DFKV_SERVER_DISKS=/var/lib/dfkv/disk0 \
	--env DFKV_MDS_LISTEN=0.0.0.0:7700 --env DFKV_MDS_HTTP_LISTEN=0.0.0.0:7780 \
	--env DFKV_MDS_DB_PATH=/var/lib/dfkv/mds.db \
	--label org.opencontainers.image.title=dfkv \
	--label org.opencontainers.image.description="KV-cache store for LLM inference: every role of the dfkv binary" \
	--label org.opencontainers.image.version="$version" \
	--label org.opencontainers.image.revision="$commit" \
	--label org.opencontainers.image.licenses=Apache-2.0 \
	"$ctr"
"${bah[@]}" commit --quiet --format oci --rm "$ctr" "$tag" >/dev/null
ctr=
echo "== built $tag, $("${bah[@]}" images --format '{{.Size}}' "$tag"); inspect it with: ${bah[*]} inspect --type image $tag"
