#!/usr/bin/env bash
# Builds an offline bundle of the Debian packages stagecraft builds against, for servers with
# no network (air-gapped clusters) or no root: the .deb files are downloaded here, on a Debian 12
# machine with network, and unpacked under DIR/root, which then travels with the source tree.
#   deploy/offline-bundle.sh DIR          download and unpack (no root needed)
#   . deploy/offline-env.sh DIR           on the target: point pkg-config, the compiler and the
#                                         loader at DIR/root, then build as usual (make test)
# Base-system libraries (libc, libgcc, libstdc++) are left out: the target's own are used.
set -euo pipefail
dir=${1:?usage: deploy/offline-bundle.sh DIR}
mkdir -p "$dir/debs" "$dir/root"
dir=$(cd "$dir" && pwd)

wanted=(libgrpc-dev libprotobuf-c-dev protobuf-c-compiler libzmq3-dev libhwloc-dev libcmocka-dev
        libjansson-dev libsqlite3-dev libmicrohttpd-dev)
skip='^(libc6|libc6-dev|libc-dev-bin|libgcc-s1|libstdc\+\+6|libstdc\+\+-.*-dev|gcc-.*|cpp-.*|libcrypt1|libcrypt-dev|linux-libc-dev|rpcsvc-proto|libnsl.*|debconf|dpkg|perl.*|libperl.*|tar|libselinux1|libpcre2-8-0|libgcc-.*-dev|g\+\+-.*|binutils.*)$'

echo "offline-bundle: resolving dependencies of ${wanted[*]}"
mapfile -t pkgs < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                        --no-breaks --no-replaces --no-enhances "${wanted[@]}" |
                    grep '^[a-z0-9]' | sort -u | grep -Ev "$skip")
echo "offline-bundle: downloading ${#pkgs[@]} packages into $dir/debs"
(cd "$dir/debs" && apt-get download -q "${pkgs[@]}" >/dev/null)
for deb in "$dir"/debs/*.deb; do
    dpkg-deb -x "$deb" "$dir/root"
done
# static archives, documentation and manuals are not needed to build or run
find "$dir/root" -name '*.a' -delete
rm -rf "$dir/root/usr/share/doc" "$dir/root/usr/share/man"
echo "offline-bundle: unpacked under $dir/root ($(du -sh "$dir/root" | cut -f1)); use it with"
echo "  . deploy/offline-env.sh $dir && make test"
