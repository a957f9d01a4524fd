//! The connection task and the handle everything else uses to reach it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{LastWill, Packet, Publish, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use rumqttc::{Outgoing, TlsConfiguration, Transport};
use serde_json::Value;
use tokio::sync::watch;

use crate::device::Confirm;
use crate::skills::watch::LiveRegistry;

use super::peers::Peers;
use super::protocol::{CallRequest, CallResponse, OFFLINE, ONLINE, Registration, TopicKind};
use super::server::Server;
use super::settings::LinkSettings;

/// Largest packet accepted from the broker (registrations of other spokes included);
/// the broker drops bigger ones instead of this spoke disconnecting over them.
const MAX_PACKET: u32 = 1024 * 1024;
/// Reconnect backoff bounds.
const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_millis(1500);

/// What this process is on the bus.
pub enum Role {
    /// A spoke: presence, registration of `skills`, serving calls (asking `confirm`
    /// for functions that need it).
    Spoke {
        /// The skills to register and serve.
        skills: Arc<LiveRegistry>,
        /// Asks the local user before `@confirm` functions run.
        confirm: Arc<dyn Confirm>,
    },
    /// A caller only (`exec`): sees the others and calls them, publishes nothing about
    /// itself, so it never competes with the daemon of the same device.
    Caller,
}

type Pending = Mutex<HashMap<u64, SyncSender<Result<Value, String>>>>;

struct Shared {
    client: AsyncClient,
    settings: LinkSettings,
    client_id: String,
    reply_topic: String,
    peers: RwLock<Peers>,
    pending: Pending,
    next_id: AtomicU64,
    ready: watch::Sender<bool>,
    server: Option<Arc<Server>>,
}

/// The handle to the MQTT link. Cheap to clone; the connection itself lives in one
/// task started by [`Link::start`].
#[derive(Clone)]
pub struct Link {
    shared: Arc<Shared>,
    task: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl Link {
    /// Starts the connection task on the current tokio runtime. Connecting happens in
    /// the background; [`Link::wait_ready`] waits for the first subscription round.
    pub fn start(settings: LinkSettings, role: Role) -> Link {
        let topics = settings.topics.clone();
        let (client_id, server_skills) = match role {
            Role::Spoke { skills, confirm } => {
                (settings.device_id.clone(), Some((skills, confirm)))
            }
            // A caller uses its own id so it never takes the daemon's session over.
            Role::Caller => (
                format!("{}-caller-{}", settings.device_id, std::process::id()),
                None,
            ),
        };
        let mut options = MqttOptions::new(
            client_id.clone(),
            settings.broker.host.clone(),
            settings.broker.port,
        );
        options.set_keep_alive(settings.keep_alive);
        options.set_max_packet_size(Some(MAX_PACKET));
        options.set_clean_start(true);
        let mut network = rumqttc::NetworkOptions::new();
        // Without TCP_NODELAY a QoS 1 round trip takes ~90 ms instead of ~0.1 ms.
        network.set_tcp_nodelay(true);
        options.set_network_options(network);
        if let Some((user, password)) = &settings.credentials {
            options.set_credentials(user.clone(), password.clone());
        }
        if let Some(tls) = &settings.tls {
            options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
                tls.clone(),
            )));
        }
        if server_skills.is_some() {
            options.set_last_will(LastWill::new(
                topics.status(&settings.device_id),
                OFFLINE,
                QoS::AtLeastOnce,
                true,
                None,
            ));
        }
        let (client, eventloop) = AsyncClient::new(options, 1024);
        let server = server_skills.map(|(skills, confirm)| {
            Arc::new(Server::new(client.clone(), &settings, skills, confirm))
        });
        let reply_topic = topics.replies(&client_id);
        let (ready, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            client,
            settings,
            client_id,
            reply_topic,
            peers: RwLock::new(Peers::default()),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            ready,
            server,
        });
        let task = tokio::spawn(run(shared.clone(), eventloop));
        Link {
            shared,
            task: Arc::new(Mutex::new(Some(task))),
        }
    }

    /// This device's id.
    pub fn device_id(&self) -> &str {
        &self.shared.settings.device_id
    }

    /// Whether connected and subscribed.
    pub fn is_ready(&self) -> bool {
        *self.shared.ready.borrow()
    }

    /// Waits until connected and subscribed (retained registrations received), at most
    /// `timeout`; returns whether that happened.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let mut rx = self.shared.ready.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|ready| *ready))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Reads the registry of other spokes.
    pub fn with_peers<R>(&self, f: impl FnOnce(&Peers) -> R) -> R {
        f(&self.shared.peers.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Publishes the registration again (after the skills changed).
    pub fn republish(&self) {
        if let Some(server) = &self.shared.server
            && self.is_ready()
        {
            publish_registration(&self.shared, server);
        }
    }

    /// Calls `class.function` on device `device_id` and waits for the answer, at most
    /// the configured call timeout. Blocks the calling thread: call it from the
    /// sandbox's thread or `spawn_blocking`, never from an async task.
    pub fn call_blocking(
        &self,
        device_id: &str,
        device_name: &str,
        class: &str,
        function: &str,
        args: &[Value],
    ) -> Result<Value, String> {
        let shared = &self.shared;
        let settings = &shared.settings;
        let qualified = format!("{class}.{function}");
        if !self.is_ready() {
            return Err(format!(
                "cannot call {qualified} on `{device_name}`: not connected to the MQTT broker {}:{} (it is retried in the background)",
                settings.broker.host, settings.broker.port
            ));
        }
        let request = CallRequest {
            schema: super::protocol::SCHEMA_VERSION,
            class: class.to_string(),
            function: function.to_string(),
            args: args.to_vec(),
            from: settings.device_name.clone(),
        };
        let payload = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
        if payload.len() > settings.max_payload {
            return Err(format!(
                "the arguments of {qualified} are {} bytes, over the limit of {} (mqtt.max_payload_bytes)",
                payload.len(),
                settings.max_payload
            ));
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        lock(&shared.pending).insert(id, tx);
        let properties = PublishProperties {
            response_topic: Some(shared.reply_topic.clone()),
            correlation_data: Some(Bytes::copy_from_slice(&id.to_be_bytes())),
            ..PublishProperties::default()
        };
        let sent = shared.client.try_publish_with_properties(
            settings.topics.rpc(device_id),
            QoS::AtLeastOnce,
            false,
            payload,
            properties,
        );
        if let Err(e) = sent {
            lock(&shared.pending).remove(&id);
            return Err(format!("cannot send the call to `{device_name}`: {e}"));
        }
        match rx.recv_timeout(settings.call_timeout) {
            Ok(outcome) => outcome,
            Err(RecvTimeoutError::Timeout) => {
                lock(&shared.pending).remove(&id);
                Err(format!(
                    "`{device_name}` did not answer {qualified} within {} ms (mqtt.call_timeout_ms); it may be busy or gone",
                    settings.call_timeout.as_millis()
                ))
            }
            Err(RecvTimeoutError::Disconnected) => Err(format!(
                "the call of {qualified} on `{device_name}` was abandoned"
            )),
        }
    }

    /// Says goodbye: publishes `offline` (a spoke), disconnects, and waits for the
    /// connection task to end (at most 2 s).
    pub async fn shutdown(&self) {
        let shared = &self.shared;
        if shared.server.is_some() && self.is_ready() {
            let _ = shared
                .client
                .publish(
                    shared.settings.topics.status(&shared.settings.device_id),
                    QoS::AtLeastOnce,
                    true,
                    OFFLINE,
                )
                .await;
        }
        let _ = shared.client.disconnect().await;
        let task = lock(&self.task).take();
        if let Some(task) = task
            && tokio::time::timeout(Duration::from_secs(2), task)
                .await
                .is_err()
        {
            tracing::warn!("the MQTT connection did not close within 2 s");
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The protected maps stay consistent across a panic elsewhere.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The connection task: polls the event loop (which reconnects), dispatches what
/// arrives, and re-establishes subscriptions and presence after every ConnAck.
async fn run(shared: Arc<Shared>, mut eventloop: EventLoop) {
    let broker = format!(
        "{}:{}",
        shared.settings.broker.host, shared.settings.broker.port
    );
    let mut backoff = BACKOFF_START;
    let mut suback_wanted = 0usize;
    let mut connected_once = false;
    let mut outage_logged = false;
    loop {
        match eventloop.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                backoff = BACKOFF_START;
                outage_logged = false;
                tracing::info!(%broker, client_id = %shared.client_id, reconnect = connected_once, "connected to the MQTT broker");
                connected_once = true;
                suback_wanted = subscribe(&shared);
            }
            Ok(Event::Incoming(Packet::SubAck(_))) => {
                if suback_wanted > 0 {
                    suback_wanted -= 1;
                    if suback_wanted == 0 {
                        // Retained messages of the earlier subscriptions arrived before
                        // this last SubAck: the peer registry is complete.
                        if let Some(server) = &shared.server {
                            announce(&shared, server);
                        }
                        shared.ready.send_replace(true);
                    }
                }
            }
            Ok(Event::Incoming(Packet::Publish(publish))) => dispatch(&shared, publish),
            Ok(Event::Incoming(Packet::Disconnect(d))) => {
                tracing::warn!(%broker, reason = ?d.reason_code, "the broker closed the connection");
            }
            Ok(Event::Outgoing(Outgoing::Disconnect)) => {
                tracing::info!(%broker, "disconnected from the MQTT broker");
                lost(&shared, "this device disconnected");
                return;
            }
            Ok(_) => {}
            Err(error) => {
                lost(&shared, "the connection to the MQTT broker was lost");
                if outage_logged {
                    tracing::debug!(%broker, %error, "still cannot reach the MQTT broker");
                } else {
                    tracing::warn!(%broker, %error, "MQTT connection failed; retrying with backoff up to {BACKOFF_CAP:?}");
                    outage_logged = true;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_CAP);
            }
        }
    }
}

/// Requests this role's subscriptions; returns how many SubAcks to expect.
fn subscribe(shared: &Shared) -> usize {
    let topics = &shared.settings.topics;
    let mut filters = vec![topics.all_status(), topics.all_skills()];
    if shared.server.is_some() {
        filters.push(topics.rpc(&shared.settings.device_id));
    }
    // The reply topic last: its SubAck means every retained message is in.
    filters.push(shared.reply_topic.clone());
    let mut requested = 0;
    for filter in filters {
        match shared
            .client
            .try_subscribe(filter.clone(), QoS::AtLeastOnce)
        {
            Ok(()) => requested += 1,
            Err(e) => tracing::error!(%filter, error = %e, "cannot subscribe"),
        }
    }
    requested
}

/// Publishes presence and registration (retained).
fn announce(shared: &Shared, server: &Server) {
    let status = shared.settings.topics.status(&shared.settings.device_id);
    if let Err(e) = shared
        .client
        .try_publish(status, QoS::AtLeastOnce, true, ONLINE)
    {
        tracing::error!(error = %e, "cannot publish the online status");
    }
    publish_registration(shared, server);
}

fn publish_registration(shared: &Shared, server: &Server) {
    let settings = &shared.settings;
    let registry = server.skills().current();
    let registration =
        Registration::of(&registry, &settings.device_id, &settings.device_name, |f| {
            settings.allow.permits(f)
        });
    let functions: usize = registration.classes.iter().map(|c| c.functions.len()).sum();
    let payload = match serde_json::to_vec(&registration) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "cannot render the registration");
            return;
        }
    };
    match shared.client.try_publish(
        settings.topics.skills(&settings.device_id),
        QoS::AtLeastOnce,
        true,
        payload,
    ) {
        Ok(()) => tracing::info!(functions, "skills registered"),
        Err(e) => tracing::error!(error = %e, "cannot publish the registration"),
    }
}

/// The connection is gone: fail the calls in flight and forget who is online.
fn lost(shared: &Shared, why: &str) {
    shared.ready.send_replace(false);
    shared
        .peers
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .all_offline();
    let pending: Vec<_> = lock(&shared.pending).drain().collect();
    for (_, tx) in pending {
        let _ = tx.try_send(Err(format!(
            "{why} while the call was in flight; it may or may not have run"
        )));
    }
}

fn dispatch(shared: &Shared, publish: Publish) {
    let Ok(topic) = std::str::from_utf8(&publish.topic) else {
        return;
    };
    let own = &shared.settings.device_id;
    match shared.settings.topics.parse(topic) {
        Some(TopicKind::Status(id)) if id != own => {
            shared
                .peers
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .set_status(id, &publish.payload);
        }
        Some(TopicKind::Skills(id)) if id != own => {
            let result = shared
                .peers
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .set_registration(id, &publish.payload);
            if let Err(error) = result {
                tracing::warn!(device = id, %error, "ignored a registration");
            }
        }
        Some(TopicKind::Rpc(id)) if id == own => {
            if let Some(server) = &shared.server {
                server.clone().accept(publish);
            }
        }
        Some(TopicKind::Replies(id)) if id == shared.client_id => reply(shared, &publish),
        _ => {}
    }
}

fn reply(shared: &Shared, publish: &Publish) {
    let id = publish
        .properties
        .as_ref()
        .and_then(|p| p.correlation_data.as_ref())
        .and_then(|c| <[u8; 8]>::try_from(c.as_ref()).ok())
        .map(u64::from_be_bytes);
    let Some(id) = id else {
        tracing::warn!("an answer without usable correlation data was ignored");
        return;
    };
    let Some(tx) = lock(&shared.pending).remove(&id) else {
        tracing::debug!(id, "an answer arrived after its call gave up");
        return;
    };
    let outcome = match serde_json::from_slice::<CallResponse>(&publish.payload) {
        Ok(response) => response.into_result(),
        Err(e) => Err(format!("the remote device sent a malformed answer: {e}")),
    };
    let _ = tx.try_send(outcome);
}
