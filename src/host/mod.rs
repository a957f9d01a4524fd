//! The host API skill code can call.
//!
//! Skills are trusted code, but they run inside a daemon that must keep answering: every
//! function here that can block (commands, HTTP, sleeps) is bounded both by its own
//! default from [`HostSettings`] and by the time left in the current skill call and
//! sandbox run ([`crate::deadline`]), waits in slices so that a cancelled run stops it
//! within [`deadline::SLICE`], and every error is a Rhai runtime error whose message says what
//! went wrong and how to fix it, because a hobbyist reads it in a log or the model reads it
//! in a failed call. `skills/README.md` is the user-facing reference for this list.

mod command;
pub mod homeassistant;
mod http;
pub mod schedule;
pub mod services;
mod speech;
pub mod spoken;
pub mod storage;
mod timing;
pub mod when;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jiff::Timestamp;
use jiff::tz::TimeZone;
use rhai::{Dynamic, Engine, EvalAltResult, ImmutableString, Map};

use crate::deadline;
use schedule::ScheduleLimits;
use services::{QuietHours, Services};
use storage::{StorageLimits, Store};

/// What skills may do on the host, from the `[skills]` config section.
#[derive(Debug, Clone, PartialEq)]
pub struct HostSettings {
    /// Root of persistent data; each skill's storage lives below it.
    pub data_dir: PathBuf,
    /// Timeout of one skill call, everything it does included.
    pub call_timeout: Duration,
    /// Default timeout of one `command(...)`.
    pub command_timeout: Duration,
    /// Default timeout of one HTTP request.
    pub http_timeout: Duration,
    /// Largest HTTP response body accepted, in bytes.
    pub http_max_bytes: usize,
    /// Largest file `read_file` returns, in bytes.
    pub file_max_bytes: usize,
    /// How much each skill may keep in its storage.
    pub storage: StorageLimits,
    /// How much each skill may schedule.
    pub schedule: ScheduleLimits,
    /// When announcements are not spoken (timers still ring).
    pub quiet_hours: Option<QuietHours>,
    /// What the running daemon lends skills (a voice, the other spokes).
    pub services: Services,
    /// The Home Assistant server `ha_get` and friends reach, when `homeassistant.url`
    /// is set.
    pub homeassistant: Option<homeassistant::HaSettings>,
    /// The embedding model the skills are indexed with for search by meaning.
    pub search: crate::embed::SearchModel,
}

impl Default for HostSettings {
    /// Values for a small board answering a spoken request:
    /// - `data_dir`: `/var/lib/strawberry-spoke`, the systemd `StateDirectory`.
    /// - `call_timeout`: 10 s; a spoken answer that takes longer is useless anyway.
    /// - `command_timeout`: 5 s; `amixer`, `df` and friends answer in milliseconds.
    /// - `http_timeout`: 5 s; a local or nearby API, not a download.
    /// - `http_max_bytes`: 1 MiB; plenty for JSON APIs, bounded on a 512 MB board.
    /// - `file_max_bytes`: 1 MiB; `/proc` and `/sys` files and small configs.
    /// - `storage`: see [`StorageLimits::default`].
    /// - `schedule`: see [`ScheduleLimits::default`].
    /// - `quiet_hours`: none.
    /// - `homeassistant`: none.
    /// - `search`: none (lexical search).
    fn default() -> Self {
        HostSettings {
            data_dir: PathBuf::from("/var/lib/strawberry-spoke"),
            call_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_secs(5),
            http_timeout: Duration::from_secs(5),
            http_max_bytes: 1024 * 1024,
            file_max_bytes: 1024 * 1024,
            storage: StorageLimits::default(),
            schedule: ScheduleLimits::default(),
            quiet_hours: None,
            services: Services::default(),
            homeassistant: None,
            search: crate::embed::SearchModel::default(),
        }
    }
}

/// What one skill's engine knows about itself.
pub struct SkillContext {
    /// The skill class, e.g. `ClockSkill`; names its storage and log lines.
    pub class: String,
    /// The host settings in force.
    pub settings: HostSettings,
    /// This skill's persistent key/value store.
    pub store: Store,
}

/// The result type of host functions, as Rhai wants it.
type HostResult<T> = Result<T, Box<EvalAltResult>>;

/// Registers the host API in a skill's engine.
pub fn register(engine: &mut Engine, ctx: Arc<SkillContext>) {
    command::register(engine, &ctx);
    http::register(engine, &ctx);
    homeassistant::register(engine, &ctx);
    register_storage(engine, &ctx);
    register_log(engine, &ctx);
    register_time(engine);
    register_files(engine, &ctx);
    register_json(engine);
    speech::register(engine, &ctx);
    timing::register(engine, &ctx);
}

/// Renders a duration the way error messages speak: `5 s`, `1.5 s`, `200 ms`.
fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms >= 1000 && ms.is_multiple_of(100) {
        format!("{} s", d.as_secs_f64())
    } else {
        format!("{ms} ms")
    }
}

/// What shortened a blocking function's own timeout, for its timeout message.
fn cut_short_by() -> &'static str {
    if deadline::bound_by_run() {
        " (the time left in this run; sandbox.total_timeout_ms)"
    } else {
        " (the time left in this skill call; settings.call_timeout)"
    }
}

/// Why a wait ended before its time: the run was cancelled, or its time is up.
fn stopped_early() -> &'static str {
    if deadline::cancelled() {
        "stopped because the request it served was cancelled"
    } else if deadline::bound_by_run() {
        "stopped because the run's time ran out (sandbox.total_timeout_ms)"
    } else {
        "stopped because this skill call's time ran out (settings.call_timeout)"
    }
}

/// Reads an optional non-negative `timeout_ms` from an options map.
fn timeout_option(func: &str, opts: &Map) -> HostResult<Option<Duration>> {
    match opts.get("timeout_ms") {
        None => Ok(None),
        Some(v) => match v.as_int() {
            Ok(ms) if ms > 0 => Ok(Some(Duration::from_millis(ms.unsigned_abs()))),
            _ => Err(format!("{func}: option timeout_ms must be a positive int, got {v}").into()),
        },
    }
}

/// Refuses option keys a function does not know, so a typo is not silently ignored.
fn check_options(func: &str, opts: &Map, known: &[&str]) -> HostResult<()> {
    for key in opts.keys() {
        if !known.contains(&key.as_str()) {
            return Err(format!(
                "{func}: unknown option `{key}`; known options: {}",
                known.join(", ")
            )
            .into());
        }
    }
    Ok(())
}

/// Converts a Rhai value to JSON; functions and other non-data values are refused.
fn to_value(func: &str, value: &Dynamic) -> HostResult<serde_json::Value> {
    rhai::serde::from_dynamic(value).map_err(|e| {
        format!(
            "{func}: a {} cannot be turned into JSON ({e})",
            value.type_name()
        )
        .into()
    })
}

/// Converts JSON to a Rhai value (`null` becomes `()`).
fn to_dynamic(func: &str, value: &serde_json::Value) -> HostResult<Dynamic> {
    rhai::serde::to_dynamic(value).map_err(|e| format!("{func}: {e}").into())
}

fn register_storage(engine: &mut Engine, ctx: &Arc<SkillContext>) {
    let c = ctx.clone();
    engine.register_fn("storage_get", move |key: &str| -> HostResult<Dynamic> {
        match c.store.get(key).map_err(|e| format!("storage_get: {e}"))? {
            Some(v) => to_dynamic("storage_get", &v),
            None => Ok(Dynamic::UNIT),
        }
    });
    let c = ctx.clone();
    engine.register_fn(
        "storage_get",
        move |key: &str, default: Dynamic| -> HostResult<Dynamic> {
            match c.store.get(key).map_err(|e| format!("storage_get: {e}"))? {
                Some(v) => to_dynamic("storage_get", &v),
                None => Ok(default),
            }
        },
    );
    let c = ctx.clone();
    engine.register_fn(
        "storage_set",
        move |key: &str, value: Dynamic| -> HostResult<()> {
            let value = to_value(&format!("storage_set(\"{key}\")"), &value)?;
            c.store
                .set(key, value)
                .map_err(|e| format!("storage_set: {e}").into())
        },
    );
    let c = ctx.clone();
    engine.register_fn("storage_remove", move |key: &str| -> HostResult<bool> {
        c.store
            .remove(key)
            .map_err(|e| format!("storage_remove: {e}").into())
    });
    let c = ctx.clone();
    engine.register_fn("storage_keys", move || -> HostResult<rhai::Array> {
        let keys = c.store.keys().map_err(|e| format!("storage_keys: {e}"))?;
        Ok(keys.into_iter().map(Dynamic::from).collect())
    });
}

fn register_log(engine: &mut Engine, ctx: &Arc<SkillContext>) {
    let c = ctx.clone();
    engine.register_fn("log_debug", move |msg: Dynamic| {
        tracing::debug!(skill = %c.class, "{msg}");
    });
    let c = ctx.clone();
    engine.register_fn("log_info", move |msg: Dynamic| {
        tracing::info!(skill = %c.class, "{msg}");
    });
    let c = ctx.clone();
    engine.register_fn("log_warn", move |msg: Dynamic| {
        tracing::warn!(skill = %c.class, "{msg}");
    });
    let c = ctx.clone();
    engine.register_fn("log_error", move |msg: Dynamic| {
        tracing::error!(skill = %c.class, "{msg}");
    });
}

/// `""` is the system zone; anything else must be an IANA name.
fn zone(name: &str) -> HostResult<TimeZone> {
    if name.is_empty() {
        return Ok(TimeZone::system());
    }
    TimeZone::get(name).map_err(|_| {
        format!("unknown time zone `{name}`; use an IANA name such as Europe/Paris").into()
    })
}

fn timestamp(func: &str, unix_seconds: f64) -> HostResult<Timestamp> {
    let nanos = unix_seconds * 1e9;
    if !nanos.is_finite() || nanos.abs() > i128::MAX as f64 {
        return Err(format!("{func}: {unix_seconds} is not a time in unix seconds").into());
    }
    Timestamp::from_nanosecond(nanos as i128).map_err(|_| {
        format!("{func}: {unix_seconds} unix seconds is outside the years -9999..9999").into()
    })
}

fn time_parts(ts: Timestamp, tz: &str) -> HostResult<Map> {
    let zoned = ts.to_zoned(zone(tz)?);
    let offset = zoned.offset();
    let weekday = zoned.weekday();
    let mut m = Map::new();
    m.insert("year".into(), i64::from(zoned.year()).into());
    m.insert("month".into(), i64::from(zoned.month()).into());
    m.insert("day".into(), i64::from(zoned.day()).into());
    m.insert("hour".into(), i64::from(zoned.hour()).into());
    m.insert("minute".into(), i64::from(zoned.minute()).into());
    m.insert("second".into(), i64::from(zoned.second()).into());
    m.insert("weekday".into(), format!("{weekday:?}").into());
    m.insert(
        "weekday_num".into(),
        i64::from(weekday.to_monday_one_offset()).into(),
    );
    let tz_name = zoned.time_zone().iana_name().unwrap_or("local").to_string();
    m.insert("tz".into(), tz_name.into());
    let secs = offset.seconds();
    let sign = if secs < 0 { '-' } else { '+' };
    let (h, min) = (secs.abs() / 3600, secs.abs() % 3600 / 60);
    m.insert("offset".into(), format!("{sign}{h:02}:{min:02}").into());
    m.insert("offset_seconds".into(), i64::from(offset.seconds()).into());
    m.insert("unix".into(), zoned.timestamp().as_second().into());
    Ok(m)
}

fn format_time(unix_seconds: f64, format: &str, tz: &str) -> HostResult<String> {
    let zoned = timestamp("format_time", unix_seconds)?.to_zoned(zone(tz)?);
    jiff::fmt::strtime::format(format, &zoned)
        .map_err(|e| format!("format_time: bad format `{format}`: {e}").into())
}

fn register_time(engine: &mut Engine) {
    engine.register_fn("now", || -> f64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    });
    engine.register_fn("now_ms", || -> i64 { Timestamp::now().as_millisecond() });
    engine.register_fn("time_parts", |tz: &str| time_parts(Timestamp::now(), tz));
    engine.register_fn("time_parts", |unix_seconds: f64, tz: &str| {
        time_parts(timestamp("time_parts", unix_seconds)?, tz)
    });
    engine.register_fn("time_parts", |unix_seconds: i64, tz: &str| {
        time_parts(timestamp("time_parts", unix_seconds as f64)?, tz)
    });
    engine.register_fn("format_time", |s: f64, format: &str, tz: &str| {
        format_time(s, format, tz)
    });
    engine.register_fn("format_time", |s: i64, format: &str, tz: &str| {
        format_time(s as f64, format, tz)
    });
    engine.register_fn("sleep_ms", |ms: i64| -> HostResult<()> {
        if ms < 0 {
            return Err(format!("sleep_ms({ms}): the duration cannot be negative").into());
        }
        let wanted = Duration::from_millis(ms.unsigned_abs());
        let allowed = deadline::bounded(wanted);
        if allowed < wanted && !deadline::bound_by_run() {
            // Failing now beats sleeping into a timeout: the call cannot succeed anyway.
            // (When the run's total is the bound, the run ends then and says so.)
            return Err(format!(
                "sleep_ms({ms}) would outlast this skill call: only {} left \
                 (settings.call_timeout)",
                human(allowed)
            )
            .into());
        }
        if deadline::sleep(wanted) {
            Ok(())
        } else {
            Err(format!("sleep_ms({ms}): {}", stopped_early()).into())
        }
    });
}

fn register_files(engine: &mut Engine, ctx: &Arc<SkillContext>) {
    let max = ctx.settings.file_max_bytes;
    engine.register_fn("read_file", move |path: &str| -> HostResult<String> {
        use std::io::Read;
        let file = std::fs::File::open(path).map_err(|e| format!("read_file {path}: {e}"))?;
        // `/proc` and `/sys` files report a size of 0, so the cap is enforced by reading.
        let mut bytes = Vec::new();
        file.take(max as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("read_file {path}: {e}"))?;
        if bytes.len() > max {
            return Err(format!(
                "read_file {path}: file larger than {max} bytes (settings.file_max_bytes)"
            )
            .into());
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    });
    engine.register_fn("list_dir", |path: &str| -> HostResult<rhai::Array> {
        let entries = std::fs::read_dir(path).map_err(|e| format!("list_dir {path}: {e}"))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| format!("list_dir {path}: {e}"))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names.into_iter().map(Dynamic::from).collect())
    });
    engine.register_fn("file_exists", |path: &str| {
        std::path::Path::new(path).exists()
    });
}

fn register_json(engine: &mut Engine) {
    engine.register_fn("parse_json", |text: &str| -> HostResult<Dynamic> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("parse_json: {e}"))?;
        to_dynamic("parse_json", &value)
    });
    engine.register_fn("to_json", |value: Dynamic| -> HostResult<ImmutableString> {
        let value = to_value("to_json", &value)?;
        Ok(value.to_string().into())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_secs(5)), "5 s");
        assert_eq!(human(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(human(Duration::from_millis(200)), "200 ms");
        assert_eq!(human(Duration::from_millis(1234)), "1234 ms");
    }
}
