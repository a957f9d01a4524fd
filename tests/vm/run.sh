#!/usr/bin/env bash
# The arm64 proof: builds the arm64 .deb, builds (or reuses) an arm64 Debian 12 image,
# boots it under qemu-system-aarch64 with Debian's 6.1 kernel and with bookworm-
# backports' 6.12 kernel, and runs tests/vm/checks inside: apt install, the sandbox and
# its limits, systemd (READY, status, journal, reload, watchdog, stop), one voice turn
# through an snd-aloop sound card against a scripted hub on this machine, the service's
# security score, apt purge. Prints a PASS/FAIL line per check, the figures measured
# under emulation, and the total time; exits 1 if any check failed.
#
#   tests/vm/run.sh [--kernel 6.1|6.12|both] [--skip-build]
#
# As root on Debian 12 (x86_64); installs what it needs with apt. Everything it makes
# is cached under target/vm ($SPOKE_VM_CACHE): the kernels, the image (rebuilt when
# tests/vm/stage2, tests/vm/initrd-init, the package list or a kernel version changes),
# and cargo's aarch64 build. A second run reuses them; each boot works on a copy-on-
# write overlay, so every run starts from a fresh Bookworm system.
#
# Why no initramfs-tools: Debian's kernels build virtio and ext4 as modules, and
# initramfs-tools would have to run arm64 code while the image is built. The initrd is
# busybox plus those few modules (tests/vm/initrd-init). Why the second debootstrap
# stage runs in the VM: it runs arm64 maintainer scripts, and this machine cannot run
# arm64 code outside a VM (no binfmt_misc for qemu-user).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${SPOKE_VM_CACHE:-$root/target/vm}
kernels=both
build=yes
while [ $# -gt 0 ]; do
    case $1 in
        --kernel) kernels=$2; shift 2 ;;
        --skip-build) build=no; shift ;;
        *) echo "usage: $0 [--kernel 6.1|6.12|both] [--skip-build]" >&2; exit 2 ;;
    esac
done
case $kernels in 6.1 | 6.12 | both) ;; *) echo "--kernel: 6.1, 6.12 or both" >&2; exit 2 ;; esac

started=$SECONDS
mkdir -p "$cache"
results=$cache/results.txt
: >"$results"
failed=0
say() { echo "[vm $(date +%T)] $*"; }
# record PASS|FAIL NAME SECONDS [DETAIL]
record() {
    line="CHECK $1 $2 ($3 s)${4:+ $4}"
    echo "$line" | tee -a "$results"
    [ "$1" = PASS ] || failed=1
}

# --- What this needs from Debian -----------------------------------------------------
packages=(qemu-system-arm debootstrap cpio e2fsprogs xz-utils espeak-ng sox python3
    gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libasound2-dev:arm64 pkg-config cmake clang libclang-dev)
install_deps() {
    local missing=()
    dpkg --print-foreign-architectures | grep -qx arm64 || { dpkg --add-architecture arm64; rm -f "$cache/.apt-updated"; }
    # The 6.7+ kernel comes from bookworm-backports.
    if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
        printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            >/etc/apt/sources.list.d/bookworm-backports.sources
        rm -f "$cache/.apt-updated"
    fi
    for p in "${packages[@]}"; do
        dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing+=("$p")
    done
    [ -e "$cache/.apt-updated" ] || { apt-get update -qq && touch "$cache/.apt-updated"; }
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing ${missing[*]}"
        # Some machines carry qemu-utils from bookworm-backports; qemu-system-arm must
        # then come from there too.
        local target=()
        dpkg -s qemu-utils 2>/dev/null | grep -q '^Version: .*bpo' && target=(-t bookworm-backports)
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${target[@]}" "${missing[@]}" >/dev/null
    fi
    rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu
    rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
}

# --- The arm64 package -----------------------------------------------------------------
# cross.toml's "Debian multiarch" recipe.
cross_build() {
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    export PKG_CONFIG_ALLOW_CROSS_aarch64_unknown_linux_gnu=1
    export PKG_CONFIG_LIBDIR_aarch64_unknown_linux_gnu=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig
    export GGML_NATIVE=OFF
    (cd "$root" && cargo build -j2 --release --locked --features cross --target aarch64-unknown-linux-gnu)
    rm -rf "$cache/deb"
    sh "$root/packaging/build-deb.sh" "$root/target/aarch64-unknown-linux-gnu/release/strawberry-spoke" arm64 "$cache/deb"
}

# --- Kernels and their initrds -----------------------------------------------------------
# The kernel release of each series, from apt's lists (kver[6.1], kver[6.12]).
declare -A kver
kernel_versions() {
    local series meta dep
    for series in 6.1 6.12; do
        if [ $series = 6.1 ]; then
            # Bookworm's own (backports are pinned lower, so not the candidate).
            meta=$(apt-cache policy linux-image-arm64:arm64 | awk '/Candidate:/ { print $2 }')
        else
            meta=$(apt-cache show linux-image-arm64:arm64 | awk '/^Version: 6\.1[2-9]\..*bpo/{ print $2; exit }')
        fi
        dep=$(apt-cache show "linux-image-arm64:arm64=$meta" | awk -F'[ ,]+' '/^Depends:/{ for (i = 2; i <= NF; i++) if ($i ~ /^linux-image-6/) { print $i; exit } }')
        [ -n "$dep" ] || { echo "no linux-image-arm64 $series in apt's lists" >&2; return 1; }
        kver[$series]=${dep#linux-image-}
    done
}

fetch_kernels() {
    local series deb v
    mkdir -p "$cache/dl" "$cache/kernel"
    for series in 6.1 6.12; do
        v=${kver[$series]}
        if [ ! -e "$cache/kernel/$v/vmlinuz" ]; then
            (cd "$cache/dl" && rm -f linux-image-*.deb && apt-get download "linux-image-$v:arm64" 2>/dev/null)
            deb=$(ls "$cache"/dl/linux-image-*.deb)
            rm -rf "$cache/kernel/$v.partial"
            mkdir -p "$cache/kernel/$v.partial/root"
            dpkg-deb -x "$deb" "$cache/kernel/$v.partial/root"
            depmod -b "$cache/kernel/$v.partial/root" "$v"
            cp "$cache/kernel/$v.partial/root/boot/vmlinuz-$v" "$cache/kernel/$v.partial/vmlinuz"
            rm -rf "$cache/kernel/$v"
            mv "$cache/kernel/$v.partial" "$cache/kernel/$v"
            rm -f "$deb"
        fi
    done
    if [ ! -x "$cache/busybox" ]; then
        (cd "$cache/dl" && rm -rf bb busybox-static_*.deb && apt-get download busybox-static:arm64 2>/dev/null &&
            dpkg-deb -x busybox-static_*.deb bb && cp bb/bin/busybox "$cache/busybox" && rm -rf bb busybox-static_*.deb)
    fi
    for series in 6.1 6.12; do
        make_initrd "${kver[$series]}"
    done
}

# The modules the root disk needs, dependencies first (from modules.dep), decompressed
# (6.12 ships .ko.xz; busybox's insmod takes plain ones).
make_initrd() {
    local v=$1 mods=$cache/kernel/$1/root/lib/modules/$1 work rel m
    local out=$cache/kernel/$v/initrd.img
    [ "$out" -nt "$root/tests/vm/initrd-init" ] && return 0
    work=$(mktemp -d)
    mkdir -p "$work/bin" "$work/modules" "$work/proc" "$work/sys" "$work/dev" "$work/newroot"
    cp "$cache/busybox" "$work/bin/busybox"
    cp "$root/tests/vm/initrd-init" "$work/init"
    chmod 0755 "$work/init"
    : >"$work/modules.order"
    add_module() {
        local rel=$1 d base
        base=$(basename "${rel%.xz}")
        grep -qxF "$base" "$work/modules.order" && return 0
        for d in $(awk -v m="$rel:" '$1 == m { for (i = 2; i <= NF; i++) print $i }' "$mods/modules.dep"); do
            add_module "$d"
        done
        case $rel in
            *.xz) xz -dc "$mods/$rel" >"$work/modules/$base" ;;
            *) cp "$mods/$rel" "$work/modules/$base" ;;
        esac
        echo "$base" >>"$work/modules.order"
    }
    for m in virtio_pci virtio_blk crc32c_generic ext4; do
        rel=$(awk -F: -v m="$m" '{ n = $1; sub(/.*\//, "", n); sub(/\.ko(\.xz)?$/, "", n) } n == m { print $1; exit }' "$mods/modules.dep")
        # Absent from modules.dep: built into this kernel.
        [ -z "$rel" ] || add_module "$rel"
    done
    (cd "$work" && find . | cpio -o -H newc --quiet | gzip -1) >"$out.tmp"
    mv "$out.tmp" "$out"
    rm -rf "$work"
}

# --- The base image ------------------------------------------------------------------------
# Everything the package depends on is in the image, so `apt install ./x.deb` resolves
# from what is installed and the VM needs no network beyond the host's hub.
image_packages=systemd-sysv,udev,kmod,dbus,alsa-utils,espeak-ng,ca-certificates,adduser,iproute2,procps,libasound2,xz-utils
qemu_base=(qemu-system-aarch64 -M virt -cpu cortex-a72 -smp 2 -m 2048 -accel tcg,thread=multi
    -nographic -monitor none -no-reboot)

build_image() {
    local stamp want v rootfs
    stamp=$(cat "$root/tests/vm/stage2" "$root/tests/vm/initrd-init"; echo "$image_packages ${kver[6.1]} ${kver[6.12]}")
    want=$(printf '%s' "$stamp" | sha256sum | cut -c1-16)
    [ -s "$cache/base.img" ] && [ "$(cat "$cache/base.stamp" 2>/dev/null)" = "$want" ] && { say "image cached"; return 0; }
    say "building the arm64 Debian 12 image (debootstrap; the second stage boots under emulation)"
    rootfs=$cache/rootfs
    rm -rf "$rootfs" "$cache/base.img" "$cache/base.stamp"
    debootstrap --foreign --arch=arm64 --variant=minbase --include="$image_packages" \
        bookworm "$rootfs" http://deb.debian.org/debian >"$cache/debootstrap.log" 2>&1 ||
        { tail -n 20 "$cache/debootstrap.log"; return 1; }
    # In a container debootstrap links /proc to the host's; the VM mounts its own.
    if [ -L "$rootfs/proc" ]; then rm "$rootfs/proc" && mkdir "$rootfs/proc"; fi
    mkdir -p "$rootfs/usr/lib/modules"
    for v in "${kver[6.1]}" "${kver[6.12]}"; do
        cp -a "$cache/kernel/$v/root/lib/modules/$v" "$rootfs/usr/lib/modules/"
    done
    install -m 0755 "$root/tests/vm/stage2" "$rootfs/vm-stage2"
    mke2fs -q -t ext4 -L spoke-root -d "$rootfs" "$cache/base.img.partial" 3G
    rm -rf "$rootfs"
    v=${kver[6.1]}
    timeout 3600 "${qemu_base[@]}" -kernel "$cache/kernel/$v/vmlinuz" -initrd "$cache/kernel/$v/initrd.img" \
        -append "console=ttyAMA0 root=/dev/vda rw panic=1 vminit=/vm-stage2" \
        -drive file="$cache/base.img.partial",if=none,id=root,format=raw -device virtio-blk-pci,drive=root \
        -nic none -serial file:"$cache/stage2.console" >"$cache/stage2.qemu.log" 2>&1 || true
    grep -q STAGE2-OK "$cache/stage2.console" || { tail -n 30 "$cache/stage2.qemu.log" "$cache/stage2.console"; return 1; }
    mv "$cache/base.img.partial" "$cache/base.img"
    echo "$want" >"$cache/base.stamp"
}

# --- What the checks get ----------------------------------------------------------------
make_payload() {
    local p=$cache/payload stt=$root/target/stt-test tmp
    rm -rf "$p" && mkdir -p "$p/hostile"
    cp "$cache"/deb/strawberry-spoke_*_arm64.deb "$root/tests/vm/checks" "$p/"
    cp "$root"/tests/hostile/{ops_while_true,memory_map_keys,output_print_flood,depth_infinite_recursion}.rhai "$p/hostile/"
    # The speech models as faster-whisper directories: the VM converts them itself with
    # the arm64 binary (`model import-ct2`), as a user would.
    [ -s "$stt/ct2/model.bin" ] || "$root/packaging/fetch-model.sh" --ct2 tiny.en "$stt/ct2"
    [ -s "$stt/base-ct2/model.bin" ] || "$root/packaging/fetch-model.sh" --ct2 base "$stt/base-ct2"
    cp -r "$stt/ct2" "$p/tiny-ct2"
    cp -r "$stt/base-ct2" "$p/base-ct2"
    tmp=$(mktemp -d)
    speak() { # voice text out.wav: 16 kHz mono, silence trimmed at both ends
        espeak-ng -v "$1" -s 150 -w "$tmp/raw.wav" "$2"
        sox -q "$tmp/raw.wav" -r 16000 -c 1 -b 16 "$3" silence 1 0.01 0.5% reverse silence 1 0.01 0.5% reverse
    }
    sox -q -n -r 16000 -c 1 -b 16 "$tmp/lead.wav" trim 0 1.0
    sox -q -n -r 16000 -c 1 -b 16 "$tmp/gap.wav" trim 0 0.3
    sox -q -n -r 16000 -c 1 -b 16 "$tmp/tail.wav" trim 0 3.0
    speak en-us+m7 "hey strawberry" "$tmp/wake.wav"
    speak en-us+m7 "what time is it" "$tmp/command.wav"
    sox -q "$tmp/lead.wav" "$tmp/wake.wav" "$tmp/gap.wav" "$tmp/command.wav" "$tmp/tail.wav" "$p/turn.wav"
    speak en-us "turn on the light in the kitchen" "$p/clip.wav"
    rm -rf "$tmp"
    bash "$root/tests/vm/make-audio.sh" "$p"
    echo "HUB_URL=http://10.0.2.2:$1/v1" >"$p/hub.env"
    rm -f "$cache/payload.img"
    mke2fs -q -t ext4 -L payload -d "$p" "$cache/payload.img" 1G >/dev/null
}

# The reply the scripted hub gives; the VM transcribes what its loopback heard and
# looks for these words.
reply="It is time for a cup of tea."

# --- One boot --------------------------------------------------------------------------
run_vm() {
    local series=$1 v=${kver[$1]} out=$cache/run-$1 t0 port
    rm -rf "$out" && mkdir -p "$out"
    python3 "$root/tests/vm/hub.py" "$out/hub.port" "$out/hub-requests.jsonl" "$reply" &
    local hub=$!
    for _ in $(seq 100); do [ -s "$out/hub.port" ] && break; sleep 0.1; done
    port=$(cat "$out/hub.port")
    make_payload "$port"
    qemu-img create -q -f qcow2 -b "$cache/base.img" -F raw "$out/overlay.qcow2"
    say "booting Linux $v (qemu-system-aarch64, cortex-a72, 2 CPUs, TCG); checks follow"
    t0=$SECONDS
    : >"$out/checks.out"
    tail -n +1 -f "$out/checks.out" | sed -u 's/^/    /' &
    local follow=$!
    timeout 2700 "${qemu_base[@]}" -kernel "$cache/kernel/$v/vmlinuz" -initrd "$cache/kernel/$v/initrd.img" \
        -append "console=ttyAMA0 root=/dev/vda rw quiet panic=1" \
        -drive file="$out/overlay.qcow2",if=none,id=root,format=qcow2 -device virtio-blk-pci,drive=root \
        -drive file="$cache/payload.img",if=none,id=payload,format=raw,readonly=on -device virtio-blk-pci,drive=payload \
        -netdev user,id=net0 -device virtio-net-pci,netdev=net0,romfile= \
        -device virtio-serial-pci -chardev file,id=checks,path="$out/checks.out" \
        -device virtserialport,chardev=checks,name=checks \
        -serial file:"$out/console.log" >"$out/qemu.log" 2>&1 || true
    kill "$follow" "$hub" 2>/dev/null || true
    wait "$hub" 2>/dev/null || true
    sed -n "s/^CHECK \(PASS\|FAIL\) \([^ ]*\) (\(.*\) s)$/\1 linux-$1:\2 \3/p" "$out/checks.out" |
        while read -r verdict name secs; do echo "CHECK $verdict $name ($secs s)" >>"$results"; done
    grep -q '^CHECK FAIL' "$out/checks.out" && failed=1
    grep -q '^CHECKS DONE' "$out/checks.out" ||
        record FAIL "linux-$1:finished" $((SECONDS - t0)) "the checks did not finish; see $out/console.log and $out/qemu.log"
    # What reached the hub: the transcript of the spoken command.
    if python3 - "$out/hub-requests.jsonl" <<'EOF'; then
import json, sys
bodies = [json.loads(line) for line in open(sys.argv[1])]
said = [m["content"] for b in bodies for m in b.get("messages", []) if m.get("role") == "user"]
print("      the hub heard:", said)
sys.exit(0 if any("what time is it" in s.lower() for s in said) else 1)
EOF
        record PASS "linux-$1:hub-heard-the-command" 0
    else
        record FAIL "linux-$1:hub-heard-the-command" 0
    fi
    sed -n 's/^FIGURE /FIGURE linux-'"$1"' /p' "$out/checks.out" >>"$results"
    say "Linux $v: $((SECONDS - t0)) s"
}

# --- Main ------------------------------------------------------------------------------
# step NAME FUNCTION...: runs the functions in a subshell that stops at the first failing
# command, records PASS or FAIL with the time, and ends the run on FAIL. (A function
# called from `if` or `||` would run with errexit off and carry on past a failure.)
step() {
    local name=$1 t=$SECONDS rc
    shift
    set +e
    (
        set -e
        for f in "$@"; do "$f"; done
    )
    rc=$?
    set -e
    if [ $rc = 0 ]; then record PASS "$name" $((SECONDS - t)); else record FAIL "$name" $((SECONDS - t)); exit 1; fi
}

install_deps
kernel_versions
if [ $build = yes ]; then step arm64-deb cross_build; fi
ls "$cache"/deb/strawberry-spoke_*_arm64.deb >/dev/null 2>&1 || { echo "no .deb in $cache/deb: run without --skip-build" >&2; exit 1; }
step image fetch_kernels build_image
case $kernels in both) series="6.1 6.12" ;; *) series=$kernels ;; esac
for s in $series; do run_vm "$s"; done

echo
echo "== arm64 VM checks (qemu-system-aarch64 TCG emulation on $(nproc) x86_64 cores: not a Pi)"
grep '^CHECK' "$results"
grep '^FIGURE' "$results" || true
echo "total $((SECONDS - started)) s; $(grep -c '^CHECK PASS' "$results") passed, $(grep -c '^CHECK FAIL' "$results") failed"
exit $failed
