//! What a running daemon lends skills beyond the host API's plain functions: a voice
//! (`say`, `cue`, `announce`), the other spokes (`announce_all`), and the schedule
//! (`schedule`).
//!
//! Why a handle filled in after the skills load: the skills are loaded before the
//! voice loop and the MQTT link exist (the link registers them), and a CLI command
//! (`exec`, `skills call`) has neither. So [`Services`] starts empty, the daemon fills
//! in what it has, and a host function that needs a missing part says which mode it is
//! in and what would work. `skills` defines what it needs ([`Household`]); the MQTT side
//! implements it, so this module knows nothing of MQTT.

use std::fmt;
use std::sync::{Arc, OnceLock};

use tokio::sync::{Notify, mpsc};

use super::spoken::Spoken;

/// The other spokes, as far as skills need them.
pub trait Household: Send + Sync {
    /// Calls `class.function(args)` on every online spoke that has it; per device, its
    /// name and the outcome. Blocks the calling thread (skills run on their own).
    fn call_all(
        &self,
        class: &str,
        function: &str,
        args: &[serde_json::Value],
    ) -> Vec<(String, Result<serde_json::Value, String>)>;
}

/// Quiet hours: a daily span of local time (`22:00-07:00` spans midnight).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietHours {
    /// Minutes after midnight it starts.
    pub from: u16,
    /// Minutes after midnight it ends.
    pub to: u16,
}

impl QuietHours {
    /// Parses `HH:MM-HH:MM`.
    pub fn parse(text: &str) -> Option<QuietHours> {
        let (from, to) = text.split_once('-')?;
        let minutes = |t: &str| -> Option<u16> {
            let (h, m) = t.trim().split_once(':')?;
            let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
            (h < 24 && m < 60).then_some(h * 60 + m)
        };
        Some(QuietHours {
            from: minutes(from)?,
            to: minutes(to)?,
        })
    }

    /// Whether `minute` (after midnight) is inside.
    pub fn contains(&self, minute: u16) -> bool {
        if self.from <= self.to {
            (self.from..self.to).contains(&minute)
        } else {
            minute >= self.from || minute < self.to
        }
    }

    /// Whether it is quiet now, in the device's time zone.
    pub fn now(&self) -> bool {
        let now = jiff::Zoned::now();
        self.contains(now.hour() as u16 * 60 + now.minute() as u16)
    }
}

impl fmt::Display for QuietHours {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:02}:{:02}-{:02}:{:02}",
            self.from / 60,
            self.from % 60,
            self.to / 60,
            self.to % 60
        )
    }
}

#[derive(Default)]
struct Inner {
    speech: OnceLock<mpsc::Sender<Spoken>>,
    household: OnceLock<Arc<dyn Household>>,
    schedule_changed: Arc<Notify>,
}

/// The daemon's parts that skills may use; cheap to clone, shared by every skill and
/// every reload.
#[derive(Clone, Default)]
pub struct Services {
    inner: Arc<Inner>,
}

impl fmt::Debug for Services {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Services")
            .field("speech", &self.inner.speech.get().is_some())
            .field("household", &self.inner.household.get().is_some())
            .finish()
    }
}

/// Services are not configuration: settings that differ only in them are equal.
impl PartialEq for Services {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Services {
    /// Services whose skills have a voice: what they say goes to `speech`.
    pub fn with_speech(speech: mpsc::Sender<Spoken>) -> Services {
        let services = Services::default();
        let _ = services.inner.speech.set(speech);
        services
    }

    /// Gives skills the other spokes. Only the first one counts: the link is made after
    /// the skills it serves, so it joins them late (see `app::Parts`).
    pub fn set_household(&self, household: Arc<dyn Household>) {
        let _ = self.inner.household.set(household);
    }

    /// Where spoken output goes, when this process has a voice.
    pub fn speech(&self) -> Option<&mpsc::Sender<Spoken>> {
        self.inner.speech.get()
    }

    /// The other spokes, when this process is linked to them.
    pub fn household(&self) -> Option<&Arc<dyn Household>> {
        self.inner.household.get()
    }

    /// Notified when this process changed the schedule, so the waiting task looks now.
    pub fn schedule_changed(&self) -> Arc<Notify> {
        self.inner.schedule_changed.clone()
    }

    /// Tells the scheduler of this process that the schedule changed.
    pub fn schedule_touched(&self) {
        self.inner.schedule_changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_hours_span_midnight() {
        let q = QuietHours::parse("22:00-07:00").unwrap();
        assert!(q.contains(23 * 60));
        assert!(q.contains(0));
        assert!(q.contains(6 * 60 + 59));
        assert!(!q.contains(7 * 60));
        assert!(!q.contains(12 * 60));
        let day = QuietHours::parse("13:00-14:30").unwrap();
        assert!(day.contains(14 * 60) && !day.contains(14 * 60 + 30));
        assert_eq!(q.to_string(), "22:00-07:00");
        assert!(QuietHours::parse("25:00-07:00").is_none());
        assert!(QuietHours::parse("22:00").is_none());
    }
}
