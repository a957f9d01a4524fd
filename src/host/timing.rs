//! Skills that act later: `schedule`, `scheduled`, `unschedule`, and the parsers the
//! bundled timers use, `parse_duration` and `parse_when` (see [`super::when`]).
//!
//! An entry belongs to the skill that made it (other skills neither see nor cancel
//! it); when it comes due the daemon rings it (see [`crate::host::schedule`]).

use std::sync::Arc;

use rhai::{Array, Dynamic, Engine, Map};

use super::{HostResult, SkillContext, check_options, to_dynamic, to_value, when};
use crate::host::schedule::{Entry, ScheduleFile};

fn file(ctx: &SkillContext) -> ScheduleFile {
    ScheduleFile::new(&ctx.settings.data_dir, ctx.settings.schedule)
}

fn schedule(ctx: &SkillContext, id: &str, due_ms: i64, text: &str, opts: &Map) -> HostResult<()> {
    check_options("schedule", opts, &["missed", "data"])?;
    let missed = match opts.get("missed") {
        None => String::new(),
        Some(v) => v
            .clone()
            .into_string()
            .map_err(|t| format!("schedule: option missed must be a string, got {t}"))?,
    };
    let data = match opts.get("data") {
        None => serde_json::Value::Null,
        Some(v) => to_value("schedule", v)?,
    };
    let text = crate::text::clean_text(text).trim().to_string();
    if text.is_empty() {
        return Err("schedule: the text to say when it is due is empty".into());
    }
    let entry = Entry {
        skill: ctx.class.clone(),
        id: id.to_string(),
        due_ms,
        text,
        missed,
        data,
    };
    file(ctx).put(entry).map_err(|e| format!("schedule: {e}"))?;
    ctx.settings.services.schedule_touched();
    Ok(())
}

fn entry_map(entry: Entry, now_ms: i64) -> HostResult<Dynamic> {
    let mut m = Map::new();
    m.insert("id".into(), entry.id.into());
    m.insert("due_ms".into(), entry.due_ms.into());
    m.insert(
        "left_s".into(),
        ((entry.due_ms - now_ms).max(0) / 1000).into(),
    );
    m.insert("text".into(), entry.text.into());
    m.insert("missed".into(), entry.missed.into());
    m.insert("data".into(), to_dynamic("scheduled", &entry.data)?);
    Ok(m.into())
}

pub(super) fn register(engine: &mut Engine, ctx: &Arc<SkillContext>) {
    let c = ctx.clone();
    engine.register_fn(
        "schedule",
        move |id: &str, due_ms: i64, text: &str| -> HostResult<()> {
            schedule(&c, id, due_ms, text, &Map::new())
        },
    );
    let c = ctx.clone();
    engine.register_fn(
        "schedule",
        move |id: &str, due_ms: i64, text: &str, opts: Map| -> HostResult<()> {
            schedule(&c, id, due_ms, text, &opts)
        },
    );
    let c = ctx.clone();
    engine.register_fn("scheduled", move || -> HostResult<Array> {
        let now = jiff::Timestamp::now().as_millisecond();
        file(&c)
            .list(&c.class)
            .map_err(|e| format!("scheduled: {e}"))?
            .into_iter()
            .map(|e| entry_map(e, now))
            .collect()
    });
    let c = ctx.clone();
    engine.register_fn("unschedule", move |id: &str| -> HostResult<bool> {
        let removed = file(&c)
            .remove(&c.class, id)
            .map_err(|e| format!("unschedule: {e}"))?;
        c.settings.services.schedule_touched();
        Ok(removed)
    });
    engine.register_fn("parse_duration", |text: &str| -> HostResult<i64> {
        let secs = when::parse_duration(text).map_err(|e| format!("parse_duration: {e}"))?;
        Ok(secs.round() as i64)
    });
    engine.register_fn("parse_when", |text: &str| -> HostResult<i64> {
        Ok(when::parse_when(text, &when::now()).map_err(|e| format!("parse_when: {e}"))?)
    });
}
