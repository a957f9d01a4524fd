//! Serving calls from other devices: every request is checked, run off the connection
//! task under a concurrency limit, and answered, with an error when anything fails.
//! Over the limit a call is answered `busy` from the connection task itself, with no
//! thread, task or queue per call, so a flood costs one publish per message.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rumqttc::v5::AsyncClient;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Publish, PublishProperties};
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::skills::policy::{Caller, Confirm, Policy};
use crate::skills::watch::LiveRegistry;
use crate::text::clean_line;

use super::protocol::{CallRequest, CallResponse, SCHEMA_VERSION, Topics};
use super::settings::LinkSettings;

/// Largest correlation data echoed back.
const MAX_CORRELATION: usize = 256;
/// Longest `from` shown in a log line, in characters.
const MAX_FROM: usize = 64;

/// Where an answer goes.
struct Answer {
    topic: String,
    correlation: Option<bytes::Bytes>,
}

/// Runs incoming calls against the local skills.
pub(super) struct Server {
    client: AsyncClient,
    topics: Topics,
    device_name: String,
    policy: Policy,
    max_payload: usize,
    max_concurrent: usize,
    running: Arc<Semaphore>,
    /// Calls answered `busy` so far (logged at powers of two, not each).
    busy: AtomicU64,
    skills: Arc<LiveRegistry>,
}

impl Server {
    pub(super) fn new(
        client: AsyncClient,
        settings: &LinkSettings,
        skills: Arc<LiveRegistry>,
        confirm: Arc<dyn Confirm>,
    ) -> Server {
        Server {
            client,
            topics: settings.topics.clone(),
            device_name: settings.device_name.clone(),
            policy: Policy::new(
                settings.device_name.clone(),
                settings.allow.clone(),
                confirm,
            ),
            max_payload: settings.max_payload,
            max_concurrent: settings.max_concurrent,
            running: Arc::new(Semaphore::new(settings.max_concurrent)),
            busy: AtomicU64::new(0),
            skills,
        }
    }

    /// The skills this server runs.
    pub(super) fn skills(&self) -> &LiveRegistry {
        &self.skills
    }

    /// Takes one request off the connection task: runs it on a blocking thread under
    /// the concurrency limit and answers from there, or answers `busy` right here.
    pub(super) fn accept(self: Arc<Self>, publish: Publish) {
        let properties = publish.properties.unwrap_or_default();
        let Some(response_topic) = properties.response_topic else {
            tracing::warn!(
                bytes = publish.payload.len(),
                "a call without a response topic cannot be answered; ignored"
            );
            return;
        };
        if !self.topics.valid_response_topic(&response_topic) {
            tracing::warn!(
                topic = %response_topic.chars().take(80).collect::<String>(),
                "a call asked for its answer outside {}/ (or on a wildcard or reserved topic); ignored",
                self.topics.prefix()
            );
            return;
        }
        let correlation = properties
            .correlation_data
            .filter(|c| c.len() <= MAX_CORRELATION);
        let payload = publish.payload;
        let answer = Answer {
            topic: response_topic,
            correlation,
        };
        // Over the limit: answered `busy` at once, so a flood cannot queue up work.
        match self.running.clone().try_acquire_owned() {
            Ok(permit) => {
                let handle = tokio::runtime::Handle::current();
                // Straight to a blocking thread (the skill blocks), answered from there:
                // one hand-off less than going through an async task first.
                tokio::task::spawn_blocking(move || {
                    let _permit = permit;
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        self.execute(&payload)
                    }))
                    .unwrap_or_else(|_| Err("the skill call crashed on the serving device".into()));
                    self.send(&handle, answer, outcome);
                });
            }
            Err(_) => {
                let busy = self.busy.fetch_add(1, Ordering::Relaxed) + 1;
                if busy.is_power_of_two() {
                    tracing::warn!(
                        busy,
                        limit = self.max_concurrent,
                        "calls answered busy so far (mqtt.max_concurrent_calls)"
                    );
                }
                let outcome = Err(format!(
                    "`{}` is busy: {} calls are already running; try again shortly",
                    self.device_name, self.max_concurrent
                ));
                // Dropped when the request channel is full: the caller's timeout then
                // answers for it, and nothing queues up behind a flood.
                if !self.publish(&answer, &outcome) {
                    tracing::debug!("a busy answer was dropped: the request channel is full");
                }
            }
        }
    }

    /// Publishes the answer; waits for room in the request channel when it is full,
    /// so no call that ran is left unanswered.
    fn send(
        &self,
        handle: &tokio::runtime::Handle,
        answer: Answer,
        outcome: Result<Value, String>,
    ) {
        if let Err(error) = &outcome {
            tracing::info!(%error, "remote call answered with an error");
        }
        if !self.publish(&answer, &outcome) {
            let (body, properties) = render(&answer, &outcome);
            let sent = handle.block_on(self.client.publish_with_properties(
                answer.topic,
                QoS::AtLeastOnce,
                false,
                body,
                properties,
            ));
            if let Err(e) = sent {
                tracing::error!(error = %e, "cannot send an answer");
            }
        }
    }

    /// Publishes the answer if the request channel has room; returns whether it did.
    fn publish(&self, answer: &Answer, outcome: &Result<Value, String>) -> bool {
        let (body, properties) = render(answer, outcome);
        self.client
            .try_publish_with_properties(
                answer.topic.clone(),
                QoS::AtLeastOnce,
                false,
                body,
                properties,
            )
            .is_ok()
    }

    /// Checks and runs one request (blocking: the skill runs here).
    fn execute(&self, payload: &[u8]) -> Result<Value, String> {
        if payload.len() > self.max_payload {
            return Err(format!(
                "the call is {} bytes, over this device's limit of {} (mqtt.max_payload_bytes)",
                payload.len(),
                self.max_payload
            ));
        }
        let request: CallRequest = serde_json::from_slice(payload).map_err(|e| {
            format!(
                "malformed call: {e}; expected {{\"class\": \"VolumeSkill\", \"function\": \"set\", \"args\": [40]}}"
            )
        })?;
        if request.schema > SCHEMA_VERSION {
            return Err(format!(
                "call schema {} is newer than this device understands ({SCHEMA_VERSION}); update `{}`",
                request.schema, self.device_name
            ));
        }
        let qualified = format!("{}.{}", request.class, request.function);
        let registry = self.skills.current();
        let Some(f) = registry
            .class(&request.class)
            .and_then(|c| c.function(&request.function))
        else {
            return Err(format!(
                "`{}` has no skill function {qualified}",
                self.device_name
            ));
        };
        let caller = Caller::Peer {
            from: &request.from,
            confirmed: request.confirmed,
        };
        self.policy
            .admit(f, &request.args, caller)
            .map_err(|e| e.to_string())?;
        let from: String = clean_line(&request.from).chars().take(MAX_FROM).collect();
        tracing::debug!(function = %qualified, %from, "serving a remote call");
        registry
            .call(&request.class, &request.function, &request.args)
            .map_err(|e| e.to_string())
    }
}

/// The body and properties of an answer.
fn render(answer: &Answer, outcome: &Result<Value, String>) -> (Vec<u8>, PublishProperties) {
    let body = serde_json::to_vec(&CallResponse::from_result(outcome.clone()))
        .unwrap_or_else(|_| br#"{"ok":false,"error":"unrenderable result"}"#.to_vec());
    let properties = PublishProperties {
        correlation_data: answer.correlation.clone(),
        ..PublishProperties::default()
    };
    (body, properties)
}
