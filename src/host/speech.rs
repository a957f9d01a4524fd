//! Skills that speak: `say`, `cue`, `announce_here`, `announce_all`, `quiet_hours`.
//!
//! None of these play anything themselves: they queue a [`Spoken`] item for the voice
//! loop, which says it when the reply in progress has ended (never in the middle of
//! it). The queue is bounded ([`SPEECH_QUEUE`]): a skill that talks in a loop gets an
//! error, not a backlog of minutes of speech.

use std::sync::Arc;

use rhai::{Array, Dynamic, Engine, Map};
use tokio::sync::mpsc::error::TrySendError;

use super::spoken::{SPEECH_QUEUE, Spoken};
use super::{HostResult, SkillContext};
use crate::audio::cues::Cue;
use crate::text::clean_text;

/// Longest text a skill may have spoken at once (about a minute of speech).
const MAX_SAY_CHARS: usize = 1000;

fn queue(ctx: &SkillContext, func: &str, item: Spoken) -> HostResult<()> {
    let Some(speech) = ctx.settings.services.speech() else {
        return Err(format!(
            "{func}: this process has no voice: only `strawberry-spoke run` speaks (`serve`, `exec` and `skills call` run without audio)"
        )
        .into());
    };
    speech.try_send(item).map_err(|e| {
        match e {
            TrySendError::Full(_) => format!(
                "{func}: {SPEECH_QUEUE} things are already waiting to be said here; try again when they have been"
            ),
            TrySendError::Closed(_) => format!("{func}: the voice loop has stopped"),
        }
        .into()
    })
}

fn text_arg(func: &str, text: &str) -> HostResult<String> {
    let text = clean_text(text).trim().to_string();
    if text.is_empty() {
        return Err(format!("{func}: there is nothing to say (the text is empty)").into());
    }
    if text.chars().count() > MAX_SAY_CHARS {
        return Err(format!(
            "{func}: the text is {} characters, over the limit of {MAX_SAY_CHARS}; say less",
            text.chars().count()
        )
        .into());
    }
    Ok(text)
}

/// Refuses an announcement during quiet hours.
fn not_quiet(ctx: &SkillContext, func: &str) -> HostResult<()> {
    match ctx.settings.quiet_hours {
        Some(quiet) if quiet.now() => Err(format!(
            "{func}: it is quiet hours here ({quiet}, announce.quiet_hours): announcements are not spoken"
        )
        .into()),
        _ => Ok(()),
    }
}

pub(super) fn register(engine: &mut Engine, ctx: &Arc<SkillContext>) {
    let c = ctx.clone();
    engine.register_fn("say", move |text: &str| -> HostResult<()> {
        queue(&c, "say", Spoken::Say(text_arg("say", text)?))
    });
    let c = ctx.clone();
    engine.register_fn("cue", move |name: &str| -> HostResult<()> {
        let Some(cue) = Cue::named(name) else {
            return Err(format!(
                "cue: unknown cue `{name}`; known cues: {}",
                Cue::NAMES.join(", ")
            )
            .into());
        };
        queue(&c, "cue", Spoken::Cue(cue))
    });
    let c = ctx.clone();
    engine.register_fn("announce_here", move |text: &str| -> HostResult<()> {
        let text = text_arg("announce_here", text)?;
        not_quiet(&c, "announce_here")?;
        queue(&c, "announce_here", Spoken::Announce(text))
    });
    let c = ctx.clone();
    engine.register_fn("quiet_hours", move || -> bool {
        c.settings.quiet_hours.is_some_and(|q| q.now())
    });
    let c = ctx.clone();
    engine.register_fn("announce_all", move |text: &str| -> HostResult<Array> {
        let text = text_arg("announce_all", text)?;
        let mut results = Array::new();
        let mut outcome = |device: &str, result: Result<(), String>| {
            let mut m = Map::new();
            m.insert("device".into(), device.into());
            m.insert("ok".into(), result.is_ok().into());
            m.insert(
                "error".into(),
                result.err().map_or(Dynamic::UNIT, Dynamic::from),
            );
            results.push(m.into());
        };
        let here = not_quiet(&c, "announce_all")
            .and_then(|()| queue(&c, "announce_all", Spoken::Announce(text.clone())));
        outcome("here", here.map_err(|e| e.to_string()));
        if let Some(household) = c.settings.services.household() {
            let args = [serde_json::Value::String(text)];
            for (device, result) in household.call_all("SpeakerSkill", "say", &args) {
                outcome(&device, result.map(|_| ()));
            }
        }
        Ok(results)
    });
}
