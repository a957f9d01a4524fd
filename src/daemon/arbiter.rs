//! Agreeing with other spokes on which one answers a wake word several of them heard.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::mqtt::protocol::WakeClaim;
use crate::wake::Detection;

use super::listener::Heard;

/// Agreeing with other spokes on which one answers a wake word several heard.
///
/// Each spoke that hears it publishes a [`WakeClaim`] and keeps capturing the command
/// for `wake.arbitration_ms`; then the one with the highest proximity answers (score,
/// then device id, break ties), and the others drop what they captured. Claims are
/// timed by when they arrive here, on this clock. One that arrived more than
/// [`Arbiter::decided_after`] before this spoke's own detection belongs to a round
/// its spoke has already decided (without knowing of this one): this spoke loses.
pub(super) struct Arbiter {
    link: crate::mqtt::Link,
    claims: tokio::sync::broadcast::Receiver<(String, WakeClaim, Instant)>,
    window: Duration,
    /// Claims of the last few seconds: device, claim, arrival.
    recent: VecDeque<(String, WakeClaim, Instant)>,
}

/// The level a spoke that is talking or answering claims: above any measured one.
const BUSY_PROXIMITY_DB: f32 = 200.0;

/// How far apart two detections of one utterance can be.
const ROUND_SPAN: Duration = Duration::from_millis(1_500);

impl Arbiter {
    pub(super) fn new(link: crate::mqtt::Link, window: Duration) -> Arbiter {
        Arbiter {
            claims: link.wake_claims(),
            link,
            window,
            recent: VecDeque::new(),
        }
    }

    /// A claim older than this when a spoke detects the wake word was decided without
    /// it: the window less the time a claim may take to travel.
    fn decided_after(&self) -> Duration {
        self.window - (self.window / 3).min(Duration::from_millis(50))
    }

    pub(super) fn heard(&mut self, claim: (String, WakeClaim, Instant)) {
        let now = Instant::now();
        while self
            .recent
            .front()
            .is_some_and(|(_, _, at)| now.duration_since(*at) > ROUND_SPAN * 2)
        {
            self.recent.pop_front();
        }
        if self.recent.len() < 64 {
            self.recent.push_back(claim);
        }
    }

    /// With other spokes online, tells them about the wake word and opens a round that
    /// waits for the window; `None` when this spoke answers at once (nobody else is
    /// online, the broker is unreachable).
    pub(super) fn open(&mut self, detection: &Detection, busy: bool) -> Option<Round> {
        if !self.link.peers_online() {
            return None;
        }
        // A spoke that is talking hears its own voice in its room's floor, so its
        // level reads low; but the person is most likely interrupting it.
        let claim = WakeClaim {
            schema: crate::mqtt::protocol::SCHEMA_VERSION,
            proximity_db: if busy {
                BUSY_PROXIMITY_DB
            } else {
                detection.proximity_db
            },
            score: detection.score,
        };
        if !self.link.claim_wake(&claim) {
            tracing::warn!("could not tell the other spokes about the wake word; answering here");
            return None;
        }
        let now = Instant::now();
        Some(Round {
            detection: detection.clone(),
            claim,
            at: now,
            decide_at: now + self.window,
            held: Vec::new(),
        })
    }

    /// Who answers instead of this spoke, and why; `None`: this spoke does.
    pub(super) fn winner(&self, round: &Round) -> Option<(String, Lost)> {
        winner(
            self.link.device_id(),
            &round.claim,
            round.at,
            &self.recent,
            self.decided_after(),
        )
    }
}

/// Why another spoke answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lost {
    /// It heard the wake word louder over its room.
    Farther,
    /// Its round was decided before this spoke heard the wake word.
    Late,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Lost::Farther => "it heard the wake word louder over its room",
            Lost::Late => "it heard the wake word first and has answered",
        })
    }
}

/// The round's verdict for spoke `own` that heard the wake word at `at` with `claim`,
/// given the other spokes' `recent` claims (device, claim, arrival): the best claim of
/// the round wins (proximity, then score, then the smaller device id), and a claim that
/// arrived `decided` or more before `at` means its round is over and this spoke lost.
fn winner(
    own: &str,
    claim: &WakeClaim,
    at: Instant,
    recent: &VecDeque<(String, WakeClaim, Instant)>,
    decided: Duration,
) -> Option<(String, Lost)> {
    let key = |device: &str, claim: &WakeClaim| {
        (
            claim.proximity_db,
            claim.score,
            std::cmp::Reverse(device.to_string()),
        )
    };
    let mut best: Option<(&str, &WakeClaim)> = None;
    for (device, other, arrived) in recent {
        let before = at.saturating_duration_since(*arrived);
        let after = arrived.saturating_duration_since(at);
        if before > ROUND_SPAN || after >= decided {
            continue;
        }
        if before >= decided {
            return Some((device.clone(), Lost::Late));
        }
        if best.is_none_or(|(d, c)| key(device, other) > key(d, c)) {
            best = Some((device, other));
        }
    }
    match best {
        Some((device, other)) if key(device, other) > key(own, claim) => {
            Some((device.to_string(), Lost::Farther))
        }
        _ => None,
    }
}

/// A wake word heard here while the spokes agree on who answers.
pub(super) struct Round {
    pub(super) detection: Detection,
    pub(super) claim: WakeClaim,
    /// When it was heard.
    pub(super) at: Instant,
    /// When the window closes.
    pub(super) decide_at: Instant,
    /// What the listener completed meanwhile.
    pub(super) held: Vec<(Heard, Instant)>,
}

/// The next claim from the other spokes; never, without an arbiter.
pub(super) async fn next_claim(
    arbiter: &mut Option<Arbiter>,
) -> Option<(String, WakeClaim, Instant)> {
    use tokio::sync::broadcast::error::RecvError;
    let Some(arbiter) = arbiter else {
        return std::future::pending().await;
    };
    loop {
        match arbiter.claims.recv().await {
            Ok(claim) => return Some(claim),
            Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(proximity_db: f32, score: f32) -> WakeClaim {
        WakeClaim {
            schema: 1,
            proximity_db,
            score,
        }
    }

    #[test]
    fn the_spoke_that_heard_it_loudest_over_its_room_answers() {
        let at = Instant::now();
        let decided = Duration::from_millis(250);
        let ms = Duration::from_millis;
        let own = claim(30.0, 0.6);
        let recent = VecDeque::from([("hall".to_string(), claim(42.0, 0.5), at + ms(40))]);
        assert_eq!(
            winner("kitchen", &own, at, &recent, decided),
            Some(("hall".to_string(), Lost::Farther))
        );
        // Louder here: this spoke answers, whatever the other's score.
        let own = claim(45.0, 0.5);
        assert_eq!(winner("kitchen", &own, at, &recent, decided), None);
        // Equal proximity: the score breaks the tie, then the smaller device id.
        let own = claim(42.0, 0.6);
        assert_eq!(winner("kitchen", &own, at, &recent, decided), None);
        let own = claim(42.0, 0.5);
        assert_eq!(winner("attic", &own, at, &recent, decided), None);
        assert_eq!(
            winner("kitchen", &own, at, &recent, decided),
            Some(("hall".to_string(), Lost::Farther))
        );
    }

    #[test]
    fn a_claim_outside_the_round_does_not_count_and_a_decided_round_wins() {
        let at = Instant::now() + Duration::from_secs(5);
        let decided = Duration::from_millis(250);
        let ms = Duration::from_millis;
        let own = claim(30.0, 0.6);
        // Arrived after this spoke's window closed, or from an utterance long before.
        let outside = VecDeque::from([
            ("hall".to_string(), claim(50.0, 0.6), at + ms(260)),
            ("attic".to_string(), claim(50.0, 0.6), at - ms(1_600)),
        ]);
        assert_eq!(winner("kitchen", &own, at, &outside, decided), None);
        // Heard 400 ms before this spoke heard it: that round is over, even though
        // this spoke heard it louder.
        let own = claim(60.0, 0.6);
        let early = VecDeque::from([("hall".to_string(), claim(20.0, 0.5), at - ms(400))]);
        assert_eq!(
            winner("kitchen", &own, at, &early, decided),
            Some(("hall".to_string(), Lost::Late))
        );
    }
}
