# shellcheck shell=bash
# Source this (". deploy/offline-env.sh DIR") to build and run stagecraft against an offline
# bundle made by deploy/offline-bundle.sh: pkg-config finds the bundled .pc files (with DIR/root
# as their sysroot), protoc-c and the shared libraries come from the bundle.
_sc_dir=$(cd "${1:?usage: . deploy/offline-env.sh DIR}" && pwd)
_sc_root=$_sc_dir/root
_sc_arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
export PKG_CONFIG_SYSROOT_DIR=$_sc_root
export PKG_CONFIG_LIBDIR=$_sc_root/usr/lib/$_sc_arch/pkgconfig:$_sc_root/usr/share/pkgconfig:$_sc_root/usr/lib/pkgconfig
export PATH=$_sc_root/usr/bin:$PATH
export LD_LIBRARY_PATH=$_sc_root/usr/lib/$_sc_arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LIBRARY_PATH=$_sc_root/usr/lib/$_sc_arch${LIBRARY_PATH:+:$LIBRARY_PATH}
# install-deps.sh would try apt-get: the bundle stands in for it
export STAGECRAFT_SKIP_DEPS=1
unset _sc_dir _sc_root _sc_arch
