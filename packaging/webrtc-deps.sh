#!/usr/bin/env bash
# Only for the `webrtc-aec` feature (off by default; the daemon's echo canceller is
# sonora, pure Rust): WebRTC's C++ echo canceller as benches/echo.rs's peer. What its
# build (the webrtc-audio-processing crate, `bundled`: WebRTC's audio processing compiled
# from the crate's own source) needs and Debian 12 lacks:
#
# - meson >= 1.1: Debian 12 has 1.0.1, whose `meson setup --reconfigure` on a new build
#   directory fails ("Directory does not contain a valid build tree"). From PyPI, into
#   a venv; its `bin` goes first on PATH while building.
# - abseil-cpp >= 20240722: Debian 12 has 20220623, and meson would otherwise download
#   abseil from GitHub (a wrap). Built here with cmake from Debian trixie's source
#   package (fetched through apt with a private package list, so the system's apt
#   sources are untouched), checked against a pinned hash, installed under the output
#   directory with its pkg-config files (PKG_CONFIG_PATH must point there, below).
#
# Needs: python3-venv, cmake, ninja-build, g++, apt (Debian packages). Takes a few
# minutes once; reruns reuse what is there.
#
# Usage: bash packaging/webrtc-deps.sh [OUT]   (OUT: target/webrtc-deps)
#   then: export PATH="$PWD/target/webrtc-deps/bin:$PATH"
#         export PKG_CONFIG_PATH="$PWD/target/webrtc-deps/abseil/lib/pkgconfig"
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-target/webrtc-deps}")
meson_version=1.12.1
absl_version=20240722.0
absl_deb=20240722.0-4
absl_sha256=df6d1f5ef540725f3851201176a60486aab332410788465c9877910bb471c34a
mkdir -p "$out/bin"

if [ "$("$out/bin/meson" --version 2>/dev/null)" != "$meson_version" ]; then
  python3 -m venv "$out/venv"
  "$out/venv/bin/pip" install --quiet "meson==$meson_version"
  ln -sfn "$out/venv/bin/meson" "$out/bin/meson"
fi

if [ "$(cat "$out/abseil/.version" 2>/dev/null)" != "$absl_version" ]; then
  work="$out/abseil-build"
  rm -rf "$work" "$out/abseil"
  mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial"
  echo "deb-src http://deb.debian.org/debian trixie main" > "$work/apt/sources.list"
  apt_opts=(-o "Dir::Etc::sourcelist=$work/apt/sources.list" -o Dir::Etc::sourceparts=/dev/null
    -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache")
  apt-get "${apt_opts[@]}" update >/dev/null
  (cd "$work" && apt-get "${apt_opts[@]}" source --download-only "abseil=$absl_deb" >/dev/null)
  tarball="$work/abseil_$absl_version.orig.tar.gz"
  echo "$absl_sha256  $tarball" | sha256sum -c --quiet
  tar -xzf "$tarball" -C "$work"
  cmake -S "$work/abseil-$absl_version" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_STANDARD=17 -DABSL_PROPAGATE_CXX_STD=ON -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DBUILD_TESTING=OFF -DABSL_BUILD_TESTING=OFF -DCMAKE_INSTALL_PREFIX="$out/abseil" >/dev/null
  ninja -C "$work/build" -j "${JOBS:-2}" >/dev/null
  ninja -C "$work/build" install >/dev/null
  echo "$absl_version" > "$out/abseil/.version"
  rm -rf "$work"
fi
echo "meson $("$out/bin/meson" --version) and abseil $absl_version in $out"
