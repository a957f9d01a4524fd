//! The volume skill against a fake `amixer` that keeps its state in a file and prints
//! what the real one prints, so the parsing and the commands are tested without a
//! sound card.
//!
//! Called through the real binary's `skills call`, whose `PATH` has the fake first:
//! this process's own environment stays as it is for the tests running beside it.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

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

/// The binary with the bundled volume skill alone, its data in `data`, and `bin` first
/// on its `PATH`.
struct Spoke {
    skills: tempfile::TempDir,
    data: tempfile::TempDir,
    path: OsString,
}

impl Spoke {
    fn new(bin: &Path) -> Spoke {
        let skills = tempfile::tempdir().unwrap();
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("skills/volume.rhai"),
            skills.path().join("volume.rhai"),
        )
        .unwrap();
        let path = std::env::var_os("PATH").unwrap_or_default();
        let dirs = std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path));
        Spoke {
            skills,
            data: tempfile::tempdir().unwrap(),
            path: std::env::join_paths(dirs).unwrap(),
        }
    }

    /// `VolumeSkill.func` with `args` (JSON): the result, or the error message.
    fn call(&self, func: &str, args: &str) -> Result<Value, String> {
        let out = Command::new(env!("CARGO_BIN_EXE_strawberry-spoke"))
            .args(["skills", "call", &format!("VolumeSkill.{func}"), args])
            .env("PATH", &self.path)
            .env("STRAWBERRY_SPOKE__SKILLS__DIR", self.skills.path())
            .env("STRAWBERRY_SPOKE__DEVICE__DATA_DIR", self.data.path())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if out.status.success() {
            Ok(serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout))))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `Master`'s volume and whether it is muted, after `func` with `args`.
    fn ok(&self, func: &str, args: &str) -> (i64, bool) {
        let v = self
            .call(func, args)
            .unwrap_or_else(|e| panic!("{func} failed: {e}"));
        assert_eq!(v["control"], "Master", "{v}");
        match (v["volume"].as_i64(), v["muted"].as_bool()) {
            (Some(volume), Some(muted)) => (volume, muted),
            _ => panic!("not a volume state: {v}"),
        }
    }
}

#[test]
fn volume_get_set_change_mute_with_a_fake_amixer() {
    let bin = tempfile::tempdir().unwrap();
    let fake = bin.path().join("amixer");
    std::fs::write(&fake, FAKE_AMIXER).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let volume = Spoke::new(bin.path());

    assert_eq!(volume.ok("get", r#"["Master"]"#), (60, false));
    assert_eq!(volume.ok("set", r#"[30, "Master"]"#), (30, false));
    assert_eq!(volume.ok("change", r#"[15, "Master"]"#), (45, false));
    assert_eq!(volume.ok("change", r#"[-5, "Master"]"#), (40, false));
    assert_eq!(volume.ok("change", r#"[80, "Master"]"#), (100, false));
    assert_eq!(volume.ok("change", r#"[-300, "Master"]"#), (0, false));
    assert_eq!(volume.ok("set", r#"[55, "Master"]"#), (55, false));
    assert_eq!(volume.ok("mute", r#"["Master"]"#), (55, true));
    assert_eq!(volume.ok("get", r#"["Master"]"#), (55, true));
    assert_eq!(volume.ok("unmute", r#"["Master"]"#), (55, false));

    let err = volume.call("set", r#"[101, "Master"]"#).unwrap_err();
    assert!(
        err.contains("volume must be between 0 and 100, got 101"),
        "{err}"
    );
    let err = volume.call("get", r#"["Speaker"]"#).unwrap_err();
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
