//! `command(program, args[, options])`: run a program without a shell.
//!
//! No shell, so arguments from the model cannot inject anything. The child gets its own
//! process group, so a timeout kills whatever it started too (no orphans), and it is
//! always waited for (no zombies). Its output is read on threads while it runs (a chatty
//! child never blocks on a full pipe) and capped at [`OUTPUT_MAX_BYTES`] per stream.
//! It starts with a clean environment ([`INHERITED_ENV`] plus what the skill passes in
//! `env`): the daemon's own environment holds secrets (API keys,
//! `STRAWBERRY_SPOKE__MQTT__PASSWORD`) that a program run on the model's behalf must not see.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rhai::{Array, Engine, Map};

use super::{HostResult, SkillContext, check_options, human, timeout_option};
use crate::deadline;

/// Most bytes kept of a command's stdout, and separately of its stderr; the rest is
/// read and dropped so the child never blocks.
pub const OUTPUT_MAX_BYTES: usize = 1024 * 1024;

/// How long to wait for the output pipes to close once the child has exited: a
/// grandchild that escaped the process group may keep them open.
const PIPE_GRACE: Duration = Duration::from_millis(200);

/// Where to find a program when `PATH` is unset (what most shells assume).
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The variables a command inherits from the daemon: where programs are, who and where
/// we are, language and time zone, and how to reach the session's sound and D-Bus (amixer
/// via PipeWire, playerctl). Everything else, secrets included, is left behind.
const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "XDG_RUNTIME_DIR",
    "DBUS_SESSION_BUS_ADDRESS",
    "PULSE_SERVER",
];

/// Debian packages of commands skills commonly run, for the "not found" message.
const PACKAGES: &[(&str, &str)] = &[
    ("amixer", "alsa-utils"),
    ("aplay", "alsa-utils"),
    ("arecord", "alsa-utils"),
    ("curl", "curl"),
    ("espeak-ng", "espeak-ng"),
    ("iwgetid", "wireless-tools"),
    ("mpc", "mpc"),
    ("nmcli", "network-manager"),
    ("playerctl", "playerctl"),
    ("vcgencmd", "libraspberrypi-bin"),
];

pub(super) fn register(engine: &mut Engine, ctx: &Arc<SkillContext>) {
    let default_timeout = ctx.settings.command_timeout;
    engine.register_fn(
        "command",
        move |program: &str, args: Array| -> HostResult<Map> {
            command(program, &args, &Map::new(), default_timeout)
        },
    );
    engine.register_fn(
        "command",
        move |program: &str, args: Array, opts: Map| -> HostResult<Map> {
            command(program, &args, &opts, default_timeout)
        },
    );
}

fn command(program: &str, args: &Array, opts: &Map, default: Duration) -> HostResult<Map> {
    check_options("command", opts, &["timeout_ms", "stdin", "env"])?;
    let wanted = timeout_option("command", opts)?.unwrap_or(default);
    let stdin = match opts.get("stdin") {
        None => None,
        Some(v) if v.is_string() => Some(v.to_string()),
        Some(v) => {
            return Err(format!("command: option stdin must be a string, got {v}").into());
        }
    };
    let env = match opts.get("env") {
        None => Vec::new(),
        Some(v) => match v.read_lock::<Map>() {
            Some(m) => m
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            None => {
                return Err(format!(
                    "command: option env must be a map of names to values, got {v}"
                )
                .into());
            }
        },
    };
    let args: Vec<String> = args
        .iter()
        .map(|a| match a.clone().into_immutable_string() {
            Ok(s) => s.to_string(),
            // Numbers and booleans are obvious enough to pass as their text.
            Err(_) => a.to_string(),
        })
        .collect();
    let timeout = deadline::bounded(wanted);
    let cut_by = (timeout < wanted).then(super::cut_short_by);
    let out = run(program, &args, &env, stdin, timeout, cut_by)?;
    let mut m = Map::new();
    m.insert("code".into(), i64::from(out.code).into());
    m.insert("stdout".into(), out.stdout.into());
    m.insert("stderr".into(), out.stderr.into());
    m.insert("truncated".into(), out.truncated.into());
    Ok(m)
}

/// What a finished command produced.
#[derive(Debug)]
pub(super) struct Output {
    /// Exit code; `128 + n` when killed by signal `n`, as shells report it.
    pub code: i32,
    /// Standard output, lossily decoded as UTF-8.
    pub stdout: String,
    /// Standard error, lossily decoded as UTF-8.
    pub stderr: String,
    /// Whether either stream was cut at [`OUTPUT_MAX_BYTES`].
    pub truncated: bool,
}

/// Why a command did not produce an [`Output`].
#[derive(Debug, thiserror::Error)]
pub(super) enum CommandError {
    /// The program is not on `PATH`.
    #[error("command `{program}` not found on PATH{hint}")]
    NotFound {
        /// The program asked for.
        program: String,
        /// `; install it (Debian: apt install x)` when the package is known.
        hint: String,
    },
    /// The program exists but could not be started.
    #[error("command `{program}` could not be started: {source}")]
    Spawn {
        /// The program asked for.
        program: String,
        /// What the system said.
        source: io::Error,
    },
    /// Waiting for the program failed.
    #[error("command `{program}`: waiting for it failed: {source}")]
    Wait {
        /// The program asked for.
        program: String,
        /// What the system said.
        source: io::Error,
    },
    /// The program ran too long and was killed.
    #[error("command `{program}` timed out after {} and was killed{}", human(*.after),
        .cut_by.unwrap_or(" (raise it with #{timeout_ms: ...} or settings.command_timeout)"))]
    TimedOut {
        /// The program asked for.
        program: String,
        /// The timeout that expired.
        after: Duration,
        /// What cut the command's own timeout short, from [`super::cut_short_by`].
        cut_by: Option<&'static str>,
    },
    /// The sandbox run the command worked for was cancelled, so it was killed.
    #[error("command `{program}` was killed: the request it served was cancelled")]
    Cancelled {
        /// The program asked for.
        program: String,
    },
}

impl From<CommandError> for Box<rhai::EvalAltResult> {
    fn from(e: CommandError) -> Self {
        e.to_string().into()
    }
}

/// Finds `program` like a shell would: a name containing `/` is a path, anything else
/// is searched for as an executable file in `PATH`.
fn resolve(program: &str) -> Result<PathBuf, CommandError> {
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if program.contains('/') {
        let p = PathBuf::from(program);
        executable(&p).then_some(p)
    } else if program.is_empty() {
        None
    } else {
        let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from(DEFAULT_PATH));
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|p| executable(p))
    };
    found.ok_or_else(|| CommandError::NotFound {
        program: program.to_string(),
        hint: PACKAGES
            .iter()
            .find(|(name, _)| {
                Some(*name) == Path::new(program).file_name().and_then(|n| n.to_str())
            })
            .map(|(_, pkg)| format!("; install it (Debian: apt install {pkg})"))
            .unwrap_or_default(),
    })
}

/// Runs `program` with `args` and a clean environment plus `env`, feeding it `stdin`,
/// for at most `timeout`.
pub(super) fn run(
    program: &str,
    args: &[String],
    env: &[(String, String)],
    stdin: Option<String>,
    timeout: Duration,
    cut_by: Option<&'static str>,
) -> Result<Output, CommandError> {
    let path = resolve(program)?;
    let timed_out = || CommandError::TimedOut {
        program: program.to_string(),
        after: timeout,
        cut_by,
    };
    if timeout.is_zero() {
        return Err(timed_out());
    }
    let mut child = Command::new(&path)
        // argv[0] as the user wrote it, so the program's own messages say `df:`, not `/usr/bin/df:`.
        .arg0(program)
        .args(args)
        .env_clear()
        .envs(clean_env())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|source| CommandError::Spawn {
            program: program.to_string(),
            source,
        })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // On a thread: a child that writes before it reads would otherwise deadlock us.
        // A child that exits without reading everything gives a broken pipe, which is fine.
        thread::spawn(move || {
            let _ = pipe.write_all(text.as_bytes());
        });
    }
    let (done_tx, done_rx) = mpsc::channel();
    let stdout = capture(child.stdout.take(), done_tx.clone());
    let stderr = capture(child.stderr.take(), done_tx);

    let status = match wait_until(&mut child, Instant::now() + timeout) {
        Ok(Some(status)) => status,
        Ok(None) => {
            kill_group(&mut child);
            if deadline::cancelled() {
                return Err(CommandError::Cancelled {
                    program: program.to_string(),
                });
            }
            return Err(timed_out());
        }
        Err(source) => {
            kill_group(&mut child);
            return Err(CommandError::Wait {
                program: program.to_string(),
                source,
            });
        }
    };
    let pipes_closed_by = Instant::now() + PIPE_GRACE;
    for _ in 0..2 {
        let left = pipes_closed_by.saturating_duration_since(Instant::now());
        if done_rx.recv_timeout(left).is_err() {
            break;
        }
    }
    let (stdout, cut_out) = take(&stdout);
    let (stderr, cut_err) = take(&stderr);
    Ok(Output {
        code: exit_code(status),
        stdout,
        stderr,
        truncated: cut_out || cut_err,
    })
}

/// The part of the daemon's environment a command inherits: [`INHERITED_ENV`] and `LC_*`.
fn clean_env() -> impl Iterator<Item = (OsString, OsString)> {
    std::env::vars_os().filter(|(name, _)| {
        name.to_str()
            .is_some_and(|n| INHERITED_ENV.contains(&n) || n.starts_with("LC_"))
    })
}

#[derive(Default)]
struct Captured {
    bytes: Vec<u8>,
    truncated: bool,
}

/// Reads a pipe to its end on a thread, keeping the first [`OUTPUT_MAX_BYTES`].
fn capture<P: Read + Send + 'static>(
    pipe: Option<P>,
    done: mpsc::Sender<()>,
) -> Arc<Mutex<Captured>> {
    let captured = Arc::new(Mutex::new(Captured::default()));
    let Some(mut pipe) = pipe else {
        let _ = done.send(());
        return captured;
    };
    let sink = captured.clone();
    thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let mut c = sink.lock().unwrap_or_else(|e| e.into_inner());
                    let room = OUTPUT_MAX_BYTES.saturating_sub(c.bytes.len());
                    c.bytes.extend_from_slice(&buf[..n.min(room)]);
                    c.truncated |= n > room;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = done.send(());
    });
    captured
}

fn take(c: &Mutex<Captured>) -> (String, bool) {
    let c = c.lock().unwrap_or_else(|e| e.into_inner());
    (String::from_utf8_lossy(&c.bytes).into_owned(), c.truncated)
}

/// Polls the child until it exits, `until` passes or the run it serves is cancelled;
/// `Ok(None)` means still running.
fn wait_until(child: &mut Child, until: Instant) -> io::Result<Option<ExitStatus>> {
    // Short first naps keep fast commands fast; later ones keep the polling cheap.
    let mut nap = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || deadline::cancelled() {
            return Ok(None);
        }
        // Naps stay below `deadline::SLICE`, so a cancellation is noticed in time.
        thread::sleep(nap.min(left));
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// Kills the child's whole process group, then reaps the child.
fn kill_group(child: &mut Child) {
    if let Ok(pgid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) has no memory effects; the child is not reaped yet, so its
        // pid (== its process group id, from `process_group(0)`) cannot have been reused.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}
