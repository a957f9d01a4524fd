//! Conversation memory of one session: the recent turns, within a token budget.
//!
//! "And tomorrow?" only means something after "what's the weather in Paris", so each
//! turn's exchange is kept and sent again with the next utterance, newest turns first
//! when the budget is tight. A session that has been quiet for longer than its idle
//! time starts afresh, as a person would expect of a new request to a voice device.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::prompt::estimate_tokens;
use crate::hub::ChatMessage;

/// The memory of one conversation.
#[derive(Debug)]
pub struct Session {
    turns: VecDeque<Vec<ChatMessage>>,
    last_active: Option<Instant>,
    idle: Duration,
    budget_tokens: usize,
}

impl Session {
    /// An empty session that forgets after `idle` and keeps `budget_tokens` of history.
    pub fn new(idle: Duration, budget_tokens: usize) -> Self {
        Session {
            turns: VecDeque::new(),
            last_active: None,
            idle,
            budget_tokens,
        }
    }

    /// Forgets everything (`/clear`).
    pub fn clear(&mut self) {
        self.turns.clear();
        self.last_active = None;
    }

    /// The messages of earlier turns, oldest first. Forgets them first when the
    /// session has been idle too long at `now`; returns whether that happened.
    pub fn history(&mut self, now: Instant) -> (Vec<ChatMessage>, bool) {
        let expired = self
            .last_active
            .is_some_and(|last| now.saturating_duration_since(last) > self.idle);
        if expired {
            self.clear();
        }
        (self.turns.iter().flatten().cloned().collect(), expired)
    }

    /// Keeps the messages of a finished turn (starting with the user's) and drops the
    /// oldest turns until the budget holds. A turn too large on its own keeps only
    /// its first and last message (the question and the answer).
    pub fn remember(&mut self, mut turn: Vec<ChatMessage>, now: Instant) {
        self.last_active = Some(now);
        if turn.is_empty() {
            return;
        }
        if tokens(&turn) > self.budget_tokens && turn.len() > 2 {
            let last = turn.pop();
            turn.truncate(1);
            turn.extend(last);
        }
        self.turns.push_back(turn);
        while self.turns.iter().map(|t| tokens(t)).sum::<usize>() > self.budget_tokens {
            if self.turns.pop_front().is_none() {
                break;
            }
        }
    }

    /// Number of turns remembered.
    pub fn len(&self) -> usize {
        self.turns.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }
}

fn tokens(messages: &[ChatMessage]) -> usize {
    messages
        .iter()
        .map(|m| {
            estimate_tokens(m.text())
                + m.tool_calls
                    .iter()
                    .map(|c| estimate_tokens(&c.function.arguments))
                    .sum::<usize>()
                + 4
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(q: &str, a: &str) -> Vec<ChatMessage> {
        vec![
            ChatMessage::new("user", q),
            ChatMessage::new("assistant", a),
        ]
    }

    #[test]
    fn oldest_turns_go_first_when_over_budget() {
        let now = Instant::now();
        let mut s = Session::new(Duration::from_secs(60), 32);
        s.remember(turn("first question here", "first answer here"), now);
        s.remember(turn("second question", "second answer"), now);
        s.remember(turn("third question", "third answer"), now);
        let (history, expired) = s.history(now);
        assert!(!expired);
        let texts: Vec<&str> = history.iter().map(ChatMessage::text).collect();
        assert_eq!(
            texts,
            [
                "second question",
                "second answer",
                "third question",
                "third answer"
            ]
        );
    }

    #[test]
    fn idle_session_forgets() {
        let now = Instant::now();
        let mut s = Session::new(Duration::from_secs(60), 1000);
        s.remember(turn("q", "a"), now);
        let (history, expired) = s.history(now + Duration::from_secs(61));
        assert!(expired && history.is_empty() && s.is_empty());
    }

    #[test]
    fn big_turn_keeps_question_and_answer() {
        let now = Instant::now();
        let mut s = Session::new(Duration::from_secs(60), 20);
        let big = "x".repeat(200);
        s.remember(
            vec![
                ChatMessage::new("user", "q"),
                ChatMessage::new("assistant", &big),
                ChatMessage::new("user", &big),
                ChatMessage::new("assistant", "a"),
            ],
            now,
        );
        let texts: Vec<String> = s
            .history(now)
            .0
            .iter()
            .map(|m| m.text().to_string())
            .collect();
        assert_eq!(texts, ["q", "a"]);
    }
}
