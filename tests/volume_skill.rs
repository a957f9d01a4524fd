//! The volume skill against a fake `amixer` that keeps its state in a file and prints
//! what the real one prints, so the parsing and the commands are tested without a
//! sound card.
//!
//! This binary holds a single test on purpose: it puts the fake first on `PATH`, and
//! changing the environment is only sound while no other thread reads it.

mod support;

use std::os::unix::fs::PermissionsExt;

use support::{Skill, field};

const FAKE_AMIXER: &str = r#"#!/bin/sh
# Fake amixer: the subset the volume skill uses, with the real output format.
state="$(dirname "$0")/state"
echo "$*" >> "$(dirname "$0")/calls"
[ -f "$state" ] || echo "60 on" > "$state"
read vol sw < "$state"
[ "$1" = "-M" ] && shift
if [ "$1" = "scontrols" ]; then
  echo "Simple mixer control 'Master',0"
  echo "Simple mixer control 'PCM',0"
  exit 0
fi
cmd="$1"; ctl="$2"; val="$3"
if [ "$ctl" != "Master" ] && [ "$ctl" != "PCM" ]; then
  echo "amixer: Unable to find simple control '$ctl',0" >&2
  echo >&2
  exit 1
fi
if [ "$cmd" = "sset" ]; then
  case "$val" in
    mute) sw=off ;;
    unmute) sw=on ;;
    *%) vol="${val%\%}" ;;
    *) echo "amixer: Invalid command!" >&2; exit 1 ;;
  esac
  echo "$vol $sw" > "$state"
fi
echo "Simple mixer control '$ctl',0"
echo "  Capabilities: pvolume pswitch pswitch-joined"
echo "  Playback channels: Front Left - Front Right"
echo "  Limits: Playback 0 - 65536"
echo "  Mono:"
echo "  Front Left: Playback $((vol * 655)) [$vol%] [$sw]"
echo "  Front Right: Playback $((vol * 655)) [$vol%] [$sw]"
"#;

fn state(v: &rhai::Dynamic) -> (i64, bool) {
    assert_eq!(field::<String>(v, "control"), "Master");
    (field(v, "volume"), field(v, "muted"))
}

#[test]
fn volume_get_set_change_mute_with_a_fake_amixer() {
    let bin = tempfile::tempdir().unwrap();
    let fake = bin.path().join("amixer");
    std::fs::write(&fake, FAKE_AMIXER).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![bin.path().to_path_buf()];
    dirs.extend(std::env::split_paths(&path));
    // SAFETY: this is the only test in this binary (the harness thread just waits for
    // it) and it has not started any thread yet, so nothing reads the environment while
    // it changes.
    unsafe { std::env::set_var("PATH", std::env::join_paths(dirs).unwrap()) };

    let data = tempfile::tempdir().unwrap();
    let volume = Skill::load("volume.rhai", data.path());
    let m = || ("Master".to_string(),);

    assert_eq!(state(&volume.ok("get", m())), (60, false));
    assert_eq!(
        state(&volume.ok("set", (30_i64, "Master".to_string()))),
        (30, false)
    );
    assert_eq!(
        state(&volume.ok("change", (15_i64, "Master".to_string()))),
        (45, false)
    );
    assert_eq!(
        state(&volume.ok("change", (-5_i64, "Master".to_string()))),
        (40, false)
    );
    assert_eq!(
        state(&volume.ok("change", (80_i64, "Master".to_string()))),
        (100, false)
    );
    assert_eq!(
        state(&volume.ok("change", (-300_i64, "Master".to_string()))),
        (0, false)
    );
    assert_eq!(
        state(&volume.ok("set", (55_i64, "Master".to_string()))),
        (55, false)
    );
    assert_eq!(state(&volume.ok("mute", m())), (55, true));
    assert_eq!(state(&volume.ok("get", m())), (55, true));
    assert_eq!(state(&volume.ok("unmute", m())), (55, false));

    let err = volume
        .call("set", (101_i64, "Master".to_string()))
        .unwrap_err();
    assert!(
        err.contains("volume must be between 0 and 100, got 101"),
        "{err}"
    );
    let err = volume.call("get", ("Speaker".to_string(),)).unwrap_err();
    assert!(
        err.contains("no mixer control \"Speaker\"; this sound card has: Master, PCM"),
        "{err}"
    );

    // The skill asks for the mapped (alsamixer-like) scale and never runs a shell.
    let calls = std::fs::read_to_string(bin.path().join("calls")).unwrap();
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(calls[0], "-M sget Master");
    assert_eq!(calls[1], "-M sset Master 30%");
    assert!(calls.contains(&"-M sset Master mute"), "{calls:?}");
    assert!(calls.contains(&"scontrols"), "{calls:?}");
}
