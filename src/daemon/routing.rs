//! The conversation task's decisions, as plain logic over a snapshot of where it stands:
//! where something the listener heard goes, what follows a turn, and what waiting
//! speech may be said now. [`super::conversation`] carries them out (channels, tasks,
//! the speaker); the rules themselves are tested here, without audio.

use std::collections::VecDeque;

use super::listener::{Command, Heard};
use super::pipeline::Outcome;
use crate::audio::cues::Cue;
use crate::host::schedule::Lateness;
use crate::host::spoken::Spoken;
use crate::wake::Detection;

/// Where the conversation stands, as far as its decisions go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Situation {
    /// A command is being listened to (after the wake word, or in a follow-up window).
    pub listening: bool,
    /// A turn asked a question and holds a place for its answer.
    pub asked: bool,
    /// ...and that turn still waits for it.
    pub asker_waits: bool,
    /// A wake word heard here waits for the other spokes' claims.
    pub round: bool,
    /// A due timer rings.
    pub ringing: bool,
    /// A turn runs.
    pub turn: bool,
    /// This spoke lost a round to a spoke that heard the wake word ending here.
    pub lost_from: Option<u64>,
}

/// Where something heard goes, with what was heard.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Route {
    /// Captured after this spoke lost the round: another spoke answers it.
    Drop,
    /// The answer to the waiting turn's question (a command, or nobody spoke).
    Answer(Option<Command>),
    /// A round with other spokes is open: kept until it is decided.
    Hold(Heard),
    /// Said while a timer rings: transcribe it to hear whether it was "stop".
    CheckStop(Command),
    /// Silence while a timer rings: listen on for the rest of the ring.
    ListenOn,
    /// Someone started speaking over the ring: it makes way for them.
    Hush,
    /// The stop word over the ring: it stops.
    StopRing,
    /// The wake word; a ring in progress stops first.
    Wake {
        /// What the detector found.
        detection: Detection,
        /// A ring was on.
        stop_ringing: bool,
    },
    /// A command: a turn answers it.
    Start(Command),
    /// A command during a reply: it waits for the reply to finish.
    Queue(Command),
    /// Nobody spoke after the wake word: back to waiting for it.
    Idle,
}

/// Where `heard` goes, given where the conversation stands.
pub(super) fn route(now: &Situation, heard: Heard) -> Route {
    let start = match &heard {
        Heard::Command(command) => Some(command.start),
        Heard::NoSpeech { at } => Some(*at),
        // Only a window over a ring says these, and nothing else waits on them.
        Heard::Speaking { .. } => return Route::Hush,
        Heard::Stop => return Route::StopRing,
        Heard::Woke(_) => None,
    };
    let after_lost_round = now
        .lost_from
        .is_some_and(|from| start.is_some_and(|start| start >= from));
    // A window this spoke opened itself (an answer, a ring) is its own to hear.
    if after_lost_round && !now.listening && !now.asked && !now.ringing {
        return Route::Drop;
    }
    // The wake word instead of an answer is no answer: the wake word is handled as always.
    if now.asker_waits {
        match heard {
            Heard::Command(command) => return Route::Answer(Some(command)),
            Heard::NoSpeech { .. } => return Route::Answer(None),
            Heard::Woke(_) | Heard::Speaking { .. } | Heard::Stop => {}
        }
    }
    if now.round {
        return Route::Hold(heard);
    }
    let ring_on = now.ringing && !now.listening;
    match heard {
        Heard::Command(command) if ring_on => Route::CheckStop(command),
        Heard::NoSpeech { .. } if ring_on => Route::ListenOn,
        Heard::Woke(detection) => Route::Wake {
            detection,
            stop_ringing: ring_on,
        },
        Heard::Command(command) if now.turn => Route::Queue(command),
        Heard::Command(command) => Route::Start(command),
        Heard::NoSpeech { .. } => Route::Idle,
        Heard::Speaking { .. } => Route::Hush,
        Heard::Stop => Route::StopRing,
    }
}

/// How a turn's task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// It ran to its end.
    Done(Outcome),
    /// It was aborted (barge-in, shutdown).
    Cancelled,
    /// It panicked.
    Failed,
}

/// What follows a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterTurn {
    /// The reply asked a question: listen for the answer without the wake word.
    FollowUp,
    /// Back to waiting for the wake word.
    Idle,
    /// The turn broke: an error cue, then idle.
    Broke,
}

/// What follows a turn that ended so, with follow-up listening `follow_up` (on or off),
/// a command `queued` behind it, and a round open or not.
pub(super) fn after_turn(ended: Ended, follow_up: bool, queued: bool, round: bool) -> AfterTurn {
    match ended {
        Ended::Done(outcome) if outcome.asked && follow_up && !queued && !round => {
            AfterTurn::FollowUp
        }
        Ended::Done(_) | Ended::Cancelled => AfterTurn::Idle,
        Ended::Failed => AfterTurn::Broke,
    }
}

/// Something waiting that is said or played now.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Delivery {
    /// Said.
    Say(String),
    /// Played.
    Cue(Cue),
    /// A chime, then said.
    Announce(String),
    /// Rung (or added to the ring in progress).
    Ring(String),
    /// A timer that came due long ago: said once, not rung.
    SayStale {
        /// The skill that scheduled it.
        skill: String,
        /// What is said.
        line: String,
    },
}

/// Whether waiting speech may be said: never into a reply, nor over someone being
/// listened to (a round is capturing a command too).
pub(super) fn may_deliver(now: &Situation) -> bool {
    !now.turn && !now.listening && !now.asked && !now.round
}

/// What of `later` is said now, in order; what stays in `later` waits for the ring to
/// end (while a timer rings, only more due timers join in).
pub(super) fn deliveries(later: &mut VecDeque<Spoken>, mut ringing: bool) -> Vec<Delivery> {
    let mut now = Vec::new();
    let mut held = VecDeque::new();
    while let Some(item) = later.pop_front() {
        match item {
            Spoken::Due(due) if due.lateness == Lateness::Stale => now.push(Delivery::SayStale {
                line: due.line(),
                skill: due.entry.skill,
            }),
            Spoken::Due(due) => {
                ringing = true;
                now.push(Delivery::Ring(due.line()));
            }
            other if ringing => held.push_back(other),
            Spoken::Say(text) => now.push(Delivery::Say(text)),
            Spoken::Cue(cue) => now.push(Delivery::Cue(cue)),
            Spoken::Announce(text) => now.push(Delivery::Announce(text)),
        }
    }
    *later = held;
    now
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::schedule::{Due, Entry};

    fn command(start: u64) -> Heard {
        Heard::Command(Command {
            samples: Vec::new(),
            start,
            end: start + 16_000,
            decided_at: start + 20_000,
            cut: false,
            transcript: None,
        })
    }

    fn woke() -> Heard {
        Heard::Woke(Detection {
            name: "hey strawberry".into(),
            score: 0.7,
            avg_score: 0.7,
            start: 0,
            end: 16_000,
            fired_at: 17_000,
            frames: 3,
            proximity_db: 30.0,
        })
    }

    fn silence(at: u64) -> Heard {
        Heard::NoSpeech { at }
    }

    /// The route's name, for short assertions.
    fn to(now: &Situation, heard: Heard) -> &'static str {
        match route(now, heard) {
            Route::Drop => "drop",
            Route::Answer(Some(_)) => "answer",
            Route::Answer(None) => "no answer",
            Route::Hold(_) => "hold",
            Route::CheckStop(_) => "check stop",
            Route::ListenOn => "listen on",
            Route::Hush => "hush",
            Route::StopRing => "stop ring",
            Route::Wake {
                stop_ringing: false,
                ..
            } => "wake",
            Route::Wake {
                stop_ringing: true, ..
            } => "stop ringing, wake",
            Route::Start(_) => "start",
            Route::Queue(_) => "queue",
            Route::Idle => "idle",
        }
    }

    #[test]
    fn a_command_starts_a_turn_or_waits_for_the_one_running() {
        let idle = Situation::default();
        assert_eq!(to(&idle, command(0)), "start");
        assert_eq!(to(&idle, silence(0)), "idle");
        assert_eq!(to(&idle, woke()), "wake");
        let busy = Situation { turn: true, ..idle };
        assert_eq!(to(&busy, command(0)), "queue");
        assert_eq!(to(&busy, woke()), "wake");
    }

    #[test]
    fn a_waiting_question_takes_the_next_utterance_but_not_the_wake_word() {
        let asking = Situation {
            asked: true,
            asker_waits: true,
            turn: true,
            ..Situation::default()
        };
        assert_eq!(to(&asking, command(0)), "answer");
        assert_eq!(to(&asking, silence(0)), "no answer");
        assert_eq!(to(&asking, woke()), "wake");
        // The turn gave up waiting: what comes is a command like any other.
        let gone = Situation {
            asker_waits: false,
            ..asking
        };
        assert_eq!(to(&gone, command(0)), "queue");
    }

    #[test]
    fn during_a_round_everything_is_held_until_it_is_decided() {
        let round = Situation {
            round: true,
            ringing: true,
            ..Situation::default()
        };
        for heard in [command(0), silence(0), woke()] {
            assert_eq!(to(&round, heard), "hold");
        }
    }

    #[test]
    fn after_losing_a_round_the_command_that_followed_the_wake_word_is_dropped() {
        let lost = Situation {
            lost_from: Some(32_000),
            ..Situation::default()
        };
        assert_eq!(to(&lost, command(32_000)), "drop");
        assert_eq!(to(&lost, silence(40_000)), "drop");
        // Said before the lost wake word ended: not the other spoke's command.
        assert_eq!(to(&lost, command(10_000)), "start");
        // A window this spoke opened itself stays its own.
        for own in [
            Situation {
                listening: true,
                ..lost
            },
            Situation {
                asked: true,
                ..lost
            },
            Situation {
                ringing: true,
                ..lost
            },
        ] {
            assert_ne!(to(&own, command(32_000)), "drop");
        }
        assert_eq!(to(&lost, woke()), "wake");
    }

    #[test]
    fn while_ringing_speech_hushes_it_and_is_checked_for_stop_and_the_wake_word_stops_it() {
        let ringing = Situation {
            ringing: true,
            ..Situation::default()
        };
        assert_eq!(to(&ringing, command(0)), "check stop");
        assert_eq!(to(&ringing, silence(0)), "listen on");
        assert_eq!(to(&ringing, woke()), "stop ringing, wake");
        assert_eq!(to(&ringing, Heard::Speaking { at: 0 }), "hush");
        assert_eq!(to(&ringing, Heard::Stop), "stop ring");
        // After the wake word, the command is a command, not a stop check.
        let woken = Situation {
            listening: true,
            ..ringing
        };
        assert_eq!(to(&woken, command(0)), "start");
    }

    #[test]
    fn a_question_in_the_reply_opens_a_follow_up_unless_something_else_comes_first() {
        let asked = Ended::Done(Outcome {
            ok: true,
            asked: true,
        });
        let told = Ended::Done(Outcome {
            ok: true,
            asked: false,
        });
        assert_eq!(after_turn(asked, true, false, false), AfterTurn::FollowUp);
        assert_eq!(after_turn(asked, false, false, false), AfterTurn::Idle);
        assert_eq!(after_turn(asked, true, true, false), AfterTurn::Idle);
        assert_eq!(after_turn(asked, true, false, true), AfterTurn::Idle);
        assert_eq!(after_turn(told, true, false, false), AfterTurn::Idle);
        assert_eq!(
            after_turn(Ended::Cancelled, true, false, false),
            AfterTurn::Idle
        );
        assert_eq!(
            after_turn(Ended::Failed, true, false, false),
            AfterTurn::Broke
        );
    }

    fn due(text: &str, lateness: Lateness) -> Spoken {
        Spoken::Due(Due {
            entry: Entry {
                skill: "TimerSkill".into(),
                id: format!("timer:{text}"),
                due_ms: 0,
                text: text.into(),
                missed: String::new(),
                data: serde_json::Value::Null,
            },
            lateness,
        })
    }

    #[test]
    fn waiting_speech_is_never_said_into_a_reply_or_over_a_listener() {
        assert!(may_deliver(&Situation::default()));
        assert!(may_deliver(&Situation {
            ringing: true,
            ..Situation::default()
        }));
        for busy in [
            Situation {
                turn: true,
                ..Situation::default()
            },
            Situation {
                listening: true,
                ..Situation::default()
            },
            Situation {
                asked: true,
                ..Situation::default()
            },
            Situation {
                round: true,
                ..Situation::default()
            },
        ] {
            assert!(!may_deliver(&busy), "{busy:?}");
        }
    }

    #[test]
    fn a_ring_holds_back_everything_but_more_due_timers() {
        let mut later = VecDeque::from([
            Spoken::Say("before".into()),
            due("pasta", Lateness::OnTime),
            Spoken::Announce("dinner".into()),
            due("tea", Lateness::OnTime),
            Spoken::Cue(Cue::Chime),
        ]);
        assert_eq!(
            deliveries(&mut later, false),
            vec![
                Delivery::Say("before".into()),
                Delivery::Ring("pasta".into()),
                Delivery::Ring("tea".into()),
            ]
        );
        assert_eq!(
            later,
            VecDeque::from([Spoken::Announce("dinner".into()), Spoken::Cue(Cue::Chime)])
        );
        // Still ringing: they keep waiting; once it ends they are said in order.
        assert!(deliveries(&mut later, true).is_empty());
        assert_eq!(later.len(), 2);
        assert_eq!(
            deliveries(&mut later, false),
            vec![
                Delivery::Announce("dinner".into()),
                Delivery::Cue(Cue::Chime)
            ]
        );
        assert!(later.is_empty());
    }

    #[test]
    fn a_timer_due_long_ago_is_said_once_not_rung() {
        let mut later = VecDeque::from([due("bins", Lateness::Stale), Spoken::Say("hi".into())]);
        let said = deliveries(&mut later, false);
        assert!(matches!(&said[0], Delivery::SayStale { skill, .. } if skill == "TimerSkill"));
        assert_eq!(said[1], Delivery::Say("hi".into()));
    }
}
