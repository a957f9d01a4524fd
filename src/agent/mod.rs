//! The conversation loop: one utterance in, the model's answer out, the model acting
//! through code it writes (docs/architecture.md, "The model exchange").
//!
//! A turn is a few rounds. Each round streams a reply from the hub; its text is cut
//! into sentences and emitted as they complete; each code block runs in the sandbox
//! the moment its closing fence arrives; what the code printed or its error goes back
//! to the model as the next message. The turn ends when a reply has no code, after
//! `agent.max_rounds` rounds, or when the model repeats code that just failed.
//!
//! The output is an ordered stream of [`TurnEvent`]s on a channel, in exactly the
//! order the model produced them: `ask` and `chat` print them, the voice pipeline
//! will speak the sentences. Confirmations travel on the same channel, so they are
//! asked in order too, by whoever consumes the stream (console now, voice later).
//!
//! Stopping a turn is dropping its future (the voice loop aborts its task on barge-in,
//! the stop phrase and shutdown). A code block runs on a blocking thread that an abort
//! cannot reach, so the turn holds the run's [`Cancel`] token through a guard that
//! cancels it when dropped: the run, and any skill call it is waiting on, ends within
//! a [`deadline::SLICE`] of the turn.

pub mod memory;
pub mod prompt;
pub mod segment;

pub use memory::Session;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::deadline;
use crate::device::Device;
use crate::hub::{ChatMessage, CodeMode, HubClient, HubError, ToolCall};
use crate::mqtt::Link;
use crate::sandbox::{Cancel, RunOutcome, Sandbox};
use crate::skills::Registry;
use crate::skills::policy::{Asking, Confirm};
use crate::skills::watch::LiveRegistry;
use prompt::PromptContext;
use segment::{Leftover, Segment, Segmenter};

/// Something the turn produced, in model order.
#[derive(Debug)]
pub enum TurnEvent {
    /// A sentence of the model's text.
    Sentence(String),
    /// A code block about to run.
    Code(String),
    /// What a code block printed and returned (`Ok` value rendered as text, empty for
    /// none), or its error.
    CodeResult {
        /// Everything the code printed.
        output: String,
        /// The value of the last expression, or the error with line and column.
        result: Result<String, String>,
    },
    /// A skill function asks for permission; answer on `reply` (dropping it is "no").
    Confirm {
        /// The call, readable, e.g. `NotesSkill.delete_all()`.
        call: String,
        /// The same as a question to say aloud, e.g. "Shall I delete all notes?".
        question: String,
        /// Where the answer goes.
        reply: oneshot::Sender<bool>,
    },
    /// Something the user should know that is not a failure (e.g. a fallback answered).
    Notice(String),
    /// Why the turn failed; always the last event of a failed turn.
    Error(String),
}

/// Why a turn failed. The message is meant for the user.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The hub could not be reached or its reply broke.
    #[error(transparent)]
    Hub(#[from] HubError),
    /// Every round had code and the model never answered.
    #[error(
        "stopped after {0} rounds of code without a final answer (agent.max_rounds); try asking more simply"
    )]
    RoundLimit(u32),
    /// The model sent the same failing code again.
    #[error("the model repeated code that had just failed ({0}); giving up on this request")]
    RepeatedFailure(String),
    /// The model's reply was empty.
    #[error("the model sent an empty reply; check the model and its chat template on the hub")]
    Empty,
    /// A sandbox run could not be started or finished.
    #[error("the code could not be run: {0}")]
    Sandbox(String),
}

/// Everything a turn needs: the hub, the sandbox and the skills.
pub struct Agent {
    hub: HubClient,
    sandbox: Arc<Sandbox>,
    registry: Arc<LiveRegistry>,
    link: Option<Link>,
    settings: AgentSettings,
    /// The part of the cancellation tree runs hang from: cancelled, every run stops.
    stop: CancellationToken,
}

/// What a turn needs besides its parts, from `[agent]`, `device.name` and `hub.mode`
/// (`config.agent_settings()`).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSettings {
    /// This device's name, as the prompt gives it.
    pub device_name: String,
    /// Whether code comes fenced or as tool calls.
    pub mode: CodeMode,
    /// Rounds of code and feedback in one turn.
    pub max_rounds: u32,
    /// Tokens the system prompt may take.
    pub prompt_budget_tokens: usize,
    /// Tokens of earlier turns kept as memory.
    pub memory_budget_tokens: usize,
    /// A session forgets its memory after this much silence.
    pub session_idle: Duration,
}

static TURN_IDS: AtomicU64 = AtomicU64::new(1);

impl Agent {
    /// An agent over `registry`, running code in `sandbox`, talking to `hub`.
    pub fn new(
        settings: &AgentSettings,
        hub: HubClient,
        sandbox: Arc<Sandbox>,
        registry: Arc<Registry>,
    ) -> Self {
        Agent::live(
            settings,
            hub,
            sandbox,
            Arc::new(LiveRegistry::new(registry)),
        )
    }

    /// Like [`Agent::new`] over a registry that hot reload keeps current.
    pub fn live(
        settings: &AgentSettings,
        hub: HubClient,
        sandbox: Arc<Sandbox>,
        registry: Arc<LiveRegistry>,
    ) -> Self {
        Agent {
            hub,
            sandbox,
            registry,
            link: None,
            settings: settings.clone(),
            stop: CancellationToken::new(),
        }
    }

    /// Hangs the sandbox runs of this agent's turns from `stop` (the daemon's tree):
    /// cancelling it stops a run in progress.
    pub fn with_stop(mut self, stop: CancellationToken) -> Self {
        self.stop = stop;
        self
    }

    /// Lets model code reach the skills of other spokes through `link`.
    pub fn with_link(mut self, link: Link) -> Self {
        self.link = Some(link);
        self
    }

    /// A new, empty session with this agent's memory settings.
    pub fn session(&self) -> Session {
        Session::new(
            self.settings.session_idle,
            self.settings.memory_budget_tokens,
        )
    }

    /// The system prompt for `utterance`: this device's skills and, with a link, those
    /// of the other devices online now.
    /// `language`: the name of the language the user spoke ("German"), when known.
    pub fn system_prompt(&self, utterance: &str, language: Option<&str>) -> String {
        let time = prompt::local_time_now();
        let context = PromptContext {
            device_name: &self.settings.device_name,
            local_time: &time,
            mode: self.settings.mode,
            budget_tokens: self.settings.prompt_budget_tokens,
            language,
        };
        let peers = self.link.as_ref().map(Link::peers);
        prompt::system_prompt(
            &self.registry.current(),
            peers.as_deref(),
            &context,
            utterance,
        )
    }

    /// The exact request body the first round of a turn on `utterance` would send
    /// (`strawberry-spoke prompt`).
    pub fn preview(&self, session: &mut Session, utterance: &str) -> Value {
        let (history, _) = session.history(Instant::now());
        let mut messages = vec![ChatMessage::new(
            "system",
            self.system_prompt(utterance, None),
        )];
        messages.extend(history);
        messages.push(ChatMessage::new("user", utterance));
        self.hub
            .request_body(self.hub.primary_model(), &messages, self.tools().as_ref())
    }

    fn tools(&self) -> Option<Value> {
        (self.settings.mode == CodeMode::Tools).then(prompt::code_tool)
    }

    /// Runs one turn on `utterance`, sending what it produces to `events` in order.
    /// The last event of a failed turn is a [`TurnEvent::Error`] with the same message
    /// as the returned error. The session remembers the turn either way.
    pub async fn turn(
        &self,
        session: &mut Session,
        utterance: &str,
        events: &mpsc::UnboundedSender<TurnEvent>,
    ) -> Result<(), TurnError> {
        self.turn_in(session, utterance, None, events).await
    }

    /// [`Agent::turn`] for an utterance whose language is known (its name, "German"):
    /// the prompt tells the model which language to answer in.
    pub async fn turn_in(
        &self,
        session: &mut Session,
        utterance: &str,
        language: Option<&str>,
        events: &mpsc::UnboundedSender<TurnEvent>,
    ) -> Result<(), TurnError> {
        let id = TURN_IDS.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!("turn", id, language);
        async {
            let started = Instant::now();
            let (history, expired) = session.history(started);
            if expired {
                tracing::info!("session was idle; memory cleared");
            }
            let mut exchange = vec![ChatMessage::new("user", utterance)];
            let result = self
                .rounds(&history, &mut exchange, utterance, language, events)
                .await;
            if let Err(error) = &result {
                let _ = events.send(TurnEvent::Error(error.to_string()));
                // Keep the roles alternating for chat templates that insist on it.
                if exchange.last().is_some_and(|m| m.role == "user") {
                    exchange.push(ChatMessage::new(
                        "assistant",
                        format!("(no answer: {error})"),
                    ));
                }
            }
            session.remember(exchange, Instant::now());
            tracing::info!(
                total_ms = started.elapsed().as_millis() as u64,
                ok = result.is_ok(),
                "turn finished"
            );
            result
        }
        .instrument(span)
        .await
    }

    async fn rounds(
        &self,
        history: &[ChatMessage],
        exchange: &mut Vec<ChatMessage>,
        utterance: &str,
        language: Option<&str>,
        events: &mpsc::UnboundedSender<TurnEvent>,
    ) -> Result<(), TurnError> {
        let built = Instant::now();
        let system = ChatMessage::new("system", self.system_prompt(utterance, language));
        tracing::debug!(
            prompt_us = built.elapsed().as_micros() as u64,
            "prompt built"
        );
        let tools = self.tools();
        let confirm = Arc::new(ChannelConfirm {
            events: events.clone(),
            answers: std::sync::Mutex::new(Vec::new()),
        });
        let mut device = Device::live(
            self.settings.device_name.clone(),
            self.registry.clone(),
            confirm.clone(),
        );
        if let Some(link) = &self.link {
            device = device.with_link(link.clone());
        }
        let device = Arc::new(device);
        let mut last_failed: Option<String> = None;
        let mut told_fallback = false;
        for round in 1..=self.settings.max_rounds {
            let mut messages = Vec::with_capacity(history.len() + exchange.len() + 1);
            messages.push(system.clone());
            messages.extend_from_slice(history);
            messages.extend_from_slice(exchange);
            let asked = Instant::now();
            let mut stream = self.hub.stream(&messages, tools.as_ref()).await?;
            tracing::debug!(
                round,
                first_byte_ms = asked.elapsed().as_millis() as u64,
                "reply started"
            );
            if stream.endpoint() > 0 && !told_fallback {
                told_fallback = true;
                let _ = events.send(TurnEvent::Notice(format!(
                    "the main model did not answer; a fallback ({}) answered",
                    stream.endpoint_url()
                )));
            }

            let mut round_state = Round {
                agent: self,
                device: &device,
                confirm: &confirm,
                events,
                last_failed: &mut last_failed,
                feedback: Vec::new(),
                blocks: 0,
            };
            let mut segmenter = Segmenter::default();
            let mut reply = String::new();
            while let Some(piece) = stream.next().await? {
                reply.push_str(&piece);
                for segment in segmenter.push(&piece) {
                    round_state.segment(segment).await?;
                }
            }
            let (rest, leftover) = segmenter.finish();
            for segment in rest {
                round_state.segment(segment).await?;
            }
            if let Leftover::UnclosedCode(_) = leftover {
                let _ = events.send(TurnEvent::Notice(
                    "the model's code block was never closed, so it did not run".into(),
                ));
                round_state.blocks += 1;
                round_state.feedback.push(
                    "Your code block was not closed with ``` so it did not run. Close every code block.".into(),
                );
            }
            let calls: Vec<ToolCall> = stream.tool_calls().to_vec();
            let mut tool_results = Vec::new();
            for call in &calls {
                let text = round_state.tool_call(call).await?;
                tool_results.push(ChatMessage {
                    role: "tool".into(),
                    content: Some(text),
                    tool_calls: Vec::new(),
                    tool_call_id: Some(call.id.clone()),
                });
            }
            let had_code = round_state.blocks > 0 || !calls.is_empty();
            let feedback = std::mem::take(&mut round_state.feedback);
            tracing::debug!(
                round,
                blocks = round_state.blocks,
                tool_calls = calls.len(),
                "round done"
            );

            exchange.push(ChatMessage {
                role: "assistant".into(),
                content: (!reply.is_empty() || calls.is_empty()).then_some(reply.clone()),
                tool_calls: calls,
                tool_call_id: None,
            });
            exchange.extend(tool_results);
            if !had_code {
                if reply.trim().is_empty() {
                    return Err(TurnError::Empty);
                }
                return Ok(());
            }
            if !feedback.is_empty() {
                let mut text = feedback.join("\n\n");
                text.push_str("\n\nNow answer the user briefly, or fix the code if it failed.");
                exchange.push(ChatMessage::new("user", text));
            }
        }
        Err(TurnError::RoundLimit(self.settings.max_rounds))
    }

    /// Runs `code` in the sandbox on a blocking thread; dropping the returned future
    /// (the turn was stopped) cancels the run.
    async fn run_code(&self, device: &Arc<Device>, code: &str) -> Result<RunOutcome, TurnError> {
        let sandbox = self.sandbox.clone();
        let device = device.clone();
        let code = code.to_string();
        let cancel = Cancel::child_of(&self.stop);
        let _stop_with_the_turn = cancel.cancel_on_drop();
        tokio::task::spawn_blocking(move || {
            sandbox.run_cancellable(&code, device.as_ref(), &cancel)
        })
        .await
        .map_err(|e| TurnError::Sandbox(e.to_string()))
    }
}

/// The state of one round while its reply streams in.
struct Round<'a> {
    agent: &'a Agent,
    device: &'a Arc<Device>,
    confirm: &'a ChannelConfirm,
    events: &'a mpsc::UnboundedSender<TurnEvent>,
    last_failed: &'a mut Option<String>,
    feedback: Vec<String>,
    blocks: usize,
}

impl Round<'_> {
    async fn segment(&mut self, segment: Segment) -> Result<(), TurnError> {
        match segment {
            Segment::Text(sentence) => {
                let _ = self.events.send(TurnEvent::Sentence(sentence));
                Ok(())
            }
            Segment::Code(code) => {
                self.blocks += 1;
                let text = self.run(&code).await?;
                self.feedback
                    .push(format!("Result of code block {}:\n{text}", self.blocks));
                Ok(())
            }
        }
    }

    async fn tool_call(&mut self, call: &ToolCall) -> Result<String, TurnError> {
        if call.function.name != prompt::CODE_TOOL {
            return Ok(format!(
                "error: there is no tool `{}`; the only tool is {}",
                call.function.name,
                prompt::CODE_TOOL
            ));
        }
        let code = serde_json::from_str::<Value>(&call.function.arguments)
            .ok()
            .and_then(|v| v.get("code").and_then(Value::as_str).map(str::to_string));
        match code {
            Some(code) => self.run(&code).await,
            None => Ok(format!(
                "error: {} takes a JSON object {{\"code\": \"...\"}}; got {}",
                prompt::CODE_TOOL,
                call.function.arguments
            )),
        }
    }

    /// Runs one block, emits it and its result, and returns the text for the model.
    async fn run(&mut self, code: &str) -> Result<String, TurnError> {
        let _ = self.events.send(TurnEvent::Code(code.to_string()));
        let outcome = self.agent.run_code(self.device, code).await?;
        tracing::debug!(
            run_us = outcome.elapsed.as_micros() as u64,
            device_calls = outcome.device_calls,
            "code ran"
        );
        let result = match &outcome.result {
            Ok(Value::Null) => Ok(String::new()),
            Ok(Value::String(s)) => Ok(s.clone()),
            Ok(value) => Ok(value.to_string()),
            Err(error) => Err(error.to_string()),
        };
        let _ = self.events.send(TurnEvent::CodeResult {
            output: outcome.output.clone(),
            result: result.clone(),
        });
        let normalised = code.trim().to_string();
        match &result {
            Err(error) => {
                if self.last_failed.as_deref() == Some(normalised.as_str()) {
                    return Err(TurnError::RepeatedFailure(error.clone()));
                }
                *self.last_failed = Some(normalised);
            }
            Ok(_) => *self.last_failed = None,
        }
        // What the person answered comes first: the model must not take a no it
        // only sees as an error (or not at all, when the script caught it) for a fault.
        let mut text = self.confirm.take_answers().join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&feedback_text(&outcome.output, &result));
        Ok(text)
    }
}

/// What the model reads about one run.
fn feedback_text(output: &str, result: &Result<String, String>) -> String {
    let mut text = String::new();
    if !output.is_empty() {
        text.push_str("printed:\n");
        text.push_str(output.trim_end());
        text.push('\n');
    }
    match result {
        Ok(value) if value.is_empty() => {
            if output.is_empty() {
                text.push_str("(ran, printed nothing)");
            }
        }
        Ok(value) => {
            text.push_str("value: ");
            text.push_str(value);
        }
        Err(error) => {
            text.push_str("error: ");
            text.push_str(error);
        }
    }
    text.trim_end().to_string()
}

/// Asks through the turn's event stream, so the question comes in order with the
/// rest of the output. Called from the sandbox's blocking thread; the wait for the
/// answer ends (as a no) when the run runs out of time or is cancelled. Each answer
/// is kept for the model's feedback on the run.
struct ChannelConfirm {
    events: mpsc::UnboundedSender<TurnEvent>,
    answers: std::sync::Mutex<Vec<String>>,
}

impl ChannelConfirm {
    /// The answers given since the last call, as the model reads them.
    fn take_answers(&self) -> Vec<String> {
        std::mem::take(&mut *self.answers.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn ask(&self, asking: &Asking) -> bool {
        let (reply, mut answer) = oneshot::channel();
        if self
            .events
            .send(TurnEvent::Confirm {
                call: asking.call.clone(),
                question: asking.question.clone(),
                reply,
            })
            .is_err()
        {
            return false;
        }
        loop {
            match answer.try_recv() {
                Ok(yes) => return yes,
                Err(oneshot::error::TryRecvError::Closed) => return false,
                Err(oneshot::error::TryRecvError::Empty) => {
                    // A person answers in seconds; a slice of polling is not noticed.
                    if !deadline::sleep(deadline::SLICE) {
                        return false;
                    }
                }
            }
        }
    }
}

impl Confirm for ChannelConfirm {
    fn confirm(&self, asking: &Asking) -> bool {
        let yes = self.ask(asking);
        let answer = if yes {
            format!("the user allowed {}", asking.call)
        } else {
            format!("the user said no to {}", asking.call)
        };
        self.answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(answer);
        yes
    }
}
