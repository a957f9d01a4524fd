//! The connection task and the handle everything else uses to reach it.
//!
//! The task owns everything that changes with the connection: the event loop, the
//! table of calls waiting for an answer, the peer registry and what this spoke last
//! published. Callers hand it calls over a bounded channel and wait on a reply channel
//! of their own; readers of the peer registry get immutable snapshots the task
//! replaces on each change, so nothing outside waits on the task or holds it up.

use std::collections::HashMap;
use std::sync::mpsc::{RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Filter, LastWill, Packet, Publish, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use rumqttc::{Outgoing, TlsConfiguration, Transport};
use serde_json::Value;
use tokio::sync::{Semaphore, broadcast, mpsc, watch};

use crate::deadline;
use crate::skills::ClassDoc;
use crate::skills::policy::Confirm;
use crate::skills::search::ClassIndex;
use crate::skills::watch::LiveRegistry;

use super::peers::{Peers, RegistrationError};
use super::protocol::{
    CallRequest, CallResponse, OFFLINE, ONLINE, Registration, TopicKind, WakeClaim, valid_device_id,
};
use super::server::Server;
use super::settings::LinkSettings;
use crate::text::clean_text;

/// Largest packet accepted from the broker (registrations of other spokes included);
/// the broker drops bigger ones instead of this spoke disconnecting over them. Raised
/// when the configured limits allow larger payloads, plus room for topic and headers.
const MAX_PACKET: u32 = 1024 * 1024;
const PACKET_OVERHEAD: usize = 4096;
/// Reconnect backoff bounds.
const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_millis(1500);
/// Calls handed to the connection task and not yet taken; each caller has at most
/// one in flight, so this is only reached by a stalled task.
const COMMAND_QUEUE: usize = 256;
/// How often a blocked caller looks at its run's deadline (the shared contract).
const WAIT_SLICE: Duration = Duration::from_millis(50);
/// Bytes of random correlation data per call: not guessable by other broker clients.
const CORRELATION_BYTES: usize = 16;
/// Corrections of this spoke's own retained topics are at most this frequent, so two
/// clients that both think they own the topic (one device id configured twice) do
/// not publish in a loop.
const CORRECTION_EVERY: Duration = Duration::from_secs(1);

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

/// What the handle asks of the connection task.
enum Command {
    /// Publish a call and answer on `reply`; give up at `until`.
    Call {
        device_id: String,
        payload: Vec<u8>,
        until: Instant,
        reply: SyncSender<Result<Value, String>>,
    },
    /// Publish the registration again (the skills changed).
    Republish,
}

struct Shared {
    client: AsyncClient,
    settings: LinkSettings,
    is_spoke: bool,
    ready: watch::Sender<bool>,
    /// Peers' registrations whose text is being embedded for search by meaning.
    indexing: watch::Sender<usize>,
    peers: watch::Sender<Arc<Peers>>,
    commands: mpsc::Sender<Command>,
    /// Other spokes' wake claims as they arrive: who, what, when (on this clock).
    wake: broadcast::Sender<(String, WakeClaim, Instant)>,
}

/// Wake claims kept for a slow listener; a round needs a handful.
const WAKE_QUEUE: usize = 16;

/// Longest the goodbye waits for the connection to close. It is the only timed wait of
/// the daemon's shutdown, and sets how long SIGTERM may take: the rest stops within a
/// microphone read (100 ms), so the daemon exits within 2 s.
pub(crate) const GOODBYE_LIMIT: Duration = Duration::from_millis(1_500);

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
        let largest = settings
            .peer_limits
            .registration_bytes
            .max(settings.max_payload)
            .saturating_add(PACKET_OVERHEAD);
        options.set_max_packet_size(Some(
            u32::try_from(largest).unwrap_or(u32::MAX).max(MAX_PACKET),
        ));
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
        let peers = Peers::new(&settings.device_name, settings.peer_limits.clone());
        let (ready, _) = watch::channel(false);
        let (peers_tx, _) = watch::channel(Arc::new(peers.clone()));
        let (commands, commands_rx) = mpsc::channel(COMMAND_QUEUE);
        let shared = Arc::new(Shared {
            client,
            settings,
            is_spoke: server.is_some(),
            ready,
            indexing: watch::channel(0).0,
            peers: peers_tx,
            commands,
            wake: broadcast::channel(WAKE_QUEUE).0,
        });
        let state = Task {
            shared: shared.clone(),
            server,
            client_id,
            reply_topic,
            peers,
            pending: HashMap::new(),
            connected: false,
            registration: None,
            own_status: Correction::default(),
            own_skills: Correction::default(),
            peers_full_warned: false,
            indexed: mpsc::unbounded_channel(),
            embedding: Arc::new(Semaphore::new(1)),
            embedding_full_warned: false,
        };
        let task = tokio::spawn(run(state, eventloop, commands_rx));
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

    /// Waits until the skill text of every registration received so far is embedded for
    /// search by meaning (at once without an embedding model), at most `timeout`;
    /// returns whether that happened.
    pub async fn wait_indexed(&self, timeout: Duration) -> bool {
        let mut rx = self.shared.indexing.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|pending| *pending == 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Waits until connected and subscribed (retained registrations received), at most
    /// `timeout`; returns whether that happened.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let mut rx = self.shared.ready.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|ready| *ready))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Whether another spoke is online now (a wake word heard here may have been heard
    /// there too).
    pub fn peers_online(&self) -> bool {
        self.is_ready() && self.with_peers(|peers| peers.all().any(|p| p.online))
    }

    /// Tells the other spokes this one heard the wake word (not retained: it is about
    /// this moment only). False when it could not be sent.
    pub fn claim_wake(&self, claim: &WakeClaim) -> bool {
        let settings = &self.shared.settings;
        let Ok(payload) = serde_json::to_vec(claim) else {
            return false;
        };
        self.shared
            .client
            .try_publish(
                settings.topics.wake(&settings.device_id),
                QoS::AtMostOnce,
                false,
                payload,
            )
            .is_ok()
    }

    /// Other spokes' wake claims from now on, each with when it arrived.
    pub fn wake_claims(&self) -> broadcast::Receiver<(String, WakeClaim, Instant)> {
        self.shared.wake.subscribe()
    }

    /// The registry of other spokes as it is now: a snapshot, never changed, that can
    /// be read for as long as needed without holding up the connection.
    pub fn peers(&self) -> Arc<Peers> {
        self.shared.peers.borrow().clone()
    }

    /// Reads the registry of other spokes (a snapshot, see [`Link::peers`]).
    pub fn with_peers<R>(&self, f: impl FnOnce(&Peers) -> R) -> R {
        f(&self.peers())
    }

    /// Publishes the registration again (after the skills changed).
    pub fn republish(&self) {
        if self.shared.is_spoke
            && let Err(e) = self.shared.commands.try_send(Command::Republish)
        {
            tracing::error!(error = %e, "cannot ask the MQTT task to republish the skills");
        }
    }

    /// Calls `class.function` on device `device_id` and waits for the answer, at most
    /// the configured call timeout and never past the current run's deadline
    /// ([`deadline`]). Blocks the calling thread: call it from the sandbox's thread or
    /// `spawn_blocking`, never from an async task.
    pub fn call_blocking(
        &self,
        device_id: &str,
        device_name: &str,
        class: &str,
        function: &str,
        args: &[Value],
    ) -> Result<Value, String> {
        self.call_blocking_as(device_id, device_name, class, function, args, false)
    }

    /// [`Link::call_blocking`], saying whether this device's user confirmed the call
    /// (`"confirmed": true`, for `@confirm` functions, which the host refuses otherwise).
    pub fn call_blocking_as(
        &self,
        device_id: &str,
        device_name: &str,
        class: &str,
        function: &str,
        args: &[Value],
        confirmed: bool,
    ) -> Result<Value, String> {
        let settings = &self.shared.settings;
        let qualified = format!("{class}.{function}");
        if !self.is_ready() {
            return Err(format!(
                "cannot call {qualified} on `{device_name}`: not connected to the MQTT broker {}:{} (it is retried in the background)",
                settings.broker.host, settings.broker.port
            ));
        }
        if deadline::expired() {
            return Err(format!(
                "no time is left in this run to call {qualified} on `{device_name}`"
            ));
        }
        let request = CallRequest {
            schema: super::protocol::SCHEMA_VERSION,
            class: class.to_string(),
            function: function.to_string(),
            args: args.to_vec(),
            from: settings.device_name.clone(),
            confirmed,
        };
        let payload = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
        if payload.len() > settings.max_payload {
            return Err(format!(
                "the arguments of {qualified} are {} bytes, over the limit of {} (mqtt.max_payload_bytes)",
                payload.len(),
                settings.max_payload
            ));
        }
        let wait = deadline::bounded(settings.call_timeout);
        let until = Instant::now() + wait;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let command = Command::Call {
            device_id: device_id.to_string(),
            payload,
            until,
            reply: tx,
        };
        if let Err(e) = self.shared.commands.try_send(command) {
            return Err(format!(
                "cannot send the call of {qualified} to `{device_name}`: the MQTT link is {}",
                match e {
                    mpsc::error::TrySendError::Full(_) => "overloaded; try again shortly",
                    mpsc::error::TrySendError::Closed(_) => "stopped",
                }
            ));
        }
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if deadline::expired() || left.is_zero() {
                return Err(if wait < settings.call_timeout {
                    format!(
                        "the run ran out of time waiting for `{device_name}` to answer {qualified}; it may or may not have run"
                    )
                } else {
                    format!(
                        "`{device_name}` did not answer {qualified} within {} ms (mqtt.call_timeout_ms); it may be busy or gone",
                        settings.call_timeout.as_millis()
                    )
                });
            }
            match rx.recv_timeout(left.min(WAIT_SLICE)) {
                Ok(outcome) => return outcome,
                Err(RecvTimeoutError::Timeout) => {}
                // The task drops a call at its end: said as a timeout, above.
                Err(RecvTimeoutError::Disconnected) if Instant::now() >= until => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!(
                        "the call of {qualified} on `{device_name}` was abandoned"
                    ));
                }
            }
        }
    }

    /// Says goodbye: publishes `offline` (a spoke), disconnects, and waits for the
    /// connection task to end (at most [`GOODBYE_LIMIT`]).
    pub async fn shutdown(&self) {
        let shared = &self.shared;
        if shared.is_spoke && self.is_ready() {
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
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task
            && tokio::time::timeout(GOODBYE_LIMIT, task).await.is_err()
        {
            tracing::warn!("the MQTT connection did not close within {GOODBYE_LIMIT:?}");
        }
    }
}

/// Skills reach the other spokes through the link without knowing it is MQTT.
impl crate::host::services::Household for Link {
    fn call_all(
        &self,
        class: &str,
        function: &str,
        args: &[Value],
    ) -> Vec<(String, Result<Value, String>)> {
        let targets: Vec<(String, String)> = self.with_peers(|peers| {
            peers
                .all()
                .filter(|p| p.online && p.function(class, function).is_some())
                .map(|p| (p.id.clone(), p.name.clone()))
                .collect()
        });
        targets
            .into_iter()
            .map(|(id, name)| {
                let outcome = self.call_blocking(&id, &name, class, function, args);
                (name, outcome)
            })
            .collect()
    }
}

/// A call waiting for its answer.
struct Pending {
    reply: SyncSender<Result<Value, String>>,
    until: Instant,
}

/// When one of this spoke's own retained topics was last put right, and whether it is
/// due again.
#[derive(Default)]
struct Correction {
    last: Option<Instant>,
    due: Option<Instant>,
}

impl Correction {
    /// Someone else wrote the topic: when to correct it (now, or when the pause since
    /// the last correction is over).
    fn request(&mut self, now: Instant) {
        let at = self
            .last
            .map_or(now, |last| (last + CORRECTION_EVERY).max(now));
        self.due = Some(self.due.map_or(at, |due| due.min(at)));
    }

    /// Whether a correction is due at `now`; marks it done.
    fn take(&mut self, now: Instant) -> bool {
        if self.due.is_some_and(|due| due <= now) {
            self.due = None;
            self.last = Some(now);
            true
        } else {
            false
        }
    }
}

/// The state the connection task owns.
struct Task {
    shared: Arc<Shared>,
    server: Option<Arc<Server>>,
    client_id: String,
    reply_topic: String,
    peers: Peers,
    /// Calls in flight, by their random correlation data.
    pending: HashMap<[u8; CORRELATION_BYTES], Pending>,
    /// Connected, subscribed, and (a spoke) announced.
    connected: bool,
    /// The registration this spoke last published.
    registration: Option<Bytes>,
    own_status: Correction,
    own_skills: Correction,
    peers_full_warned: bool,
    /// Peers' skill text embedded off this task, coming back to replace word-only indexes.
    indexed: (
        mpsc::UnboundedSender<Indexed>,
        mpsc::UnboundedReceiver<Indexed>,
    ),
    /// One registration embedded at a time.
    embedding: Arc<Semaphore>,
    embedding_full_warned: bool,
}

/// Registrations waiting to be embedded at most: a household's worth many times over;
/// past it (a client flooding registrations) a new one is searched by its words.
const MAX_EMBEDDING_QUEUE: usize = 64;

/// A peer's search index with embeddings, built from `classes` (`None`: the build
/// failed, the word-only index stays).
struct Indexed {
    id: String,
    classes: Arc<Vec<ClassDoc>>,
    index: Option<ClassIndex>,
}

/// The connection task: polls the event loop (which reconnects), dispatches what
/// arrives, takes calls from the handles, and re-establishes subscriptions and
/// presence after every ConnAck.
async fn run(mut task: Task, mut eventloop: EventLoop, mut commands: mpsc::Receiver<Command>) {
    let settings = &task.shared.settings;
    let broker = format!("{}:{}", settings.broker.host, settings.broker.port);
    let mut backoff = BACKOFF_START;
    let mut suback_wanted = 0usize;
    let mut connected_once = false;
    let mut outage_logged = false;
    loop {
        let event = task.serve(&mut commands, eventloop.poll()).await;
        match event {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                backoff = BACKOFF_START;
                outage_logged = false;
                tracing::info!(%broker, client_id = %task.client_id, reconnect = connected_once, "connected to the MQTT broker");
                connected_once = true;
                suback_wanted = task.subscribe();
            }
            Ok(Event::Incoming(Packet::SubAck(_))) => {
                if suback_wanted > 0 {
                    suback_wanted -= 1;
                    if suback_wanted == 0 {
                        // Retained messages of the earlier subscriptions arrived before
                        // this last SubAck: the peer registry is complete.
                        task.announce();
                        task.connected = true;
                        task.shared.ready.send_replace(true);
                    }
                }
            }
            Ok(Event::Incoming(Packet::Publish(publish))) => task.dispatch(publish),
            Ok(Event::Incoming(Packet::Disconnect(d))) => {
                tracing::warn!(%broker, reason = ?d.reason_code, "the broker closed the connection");
            }
            Ok(Event::Outgoing(Outgoing::Disconnect)) => {
                tracing::info!(%broker, "disconnected from the MQTT broker");
                task.lost("this device disconnected");
                return;
            }
            Ok(_) => {}
            Err(error) => {
                task.lost("the connection to the MQTT broker was lost");
                if outage_logged {
                    tracing::debug!(%broker, %error, "still cannot reach the MQTT broker");
                } else {
                    tracing::warn!(%broker, %error, "MQTT connection failed; retrying with backoff up to {BACKOFF_CAP:?}");
                    outage_logged = true;
                }
                task.serve(&mut commands, tokio::time::sleep(backoff)).await;
                backoff = (backoff * 2).min(BACKOFF_CAP);
            }
        }
    }
}

impl Task {
    /// Runs `until` to completion while taking commands and keeping time: the event
    /// loop's future is never dropped half way (it may be writing a packet).
    async fn serve<F: Future>(
        &mut self,
        commands: &mut mpsc::Receiver<Command>,
        until: F,
    ) -> F::Output {
        tokio::pin!(until);
        loop {
            let wake = self.next_wake();
            tokio::select! {
                output = &mut until => return output,
                Some(command) = commands.recv() => self.command(command),
                Some(indexed) = self.indexed.1.recv() => {
                    if let Some(index) = indexed.index
                        && self.peers.set_index(&indexed.id, &indexed.classes, index)
                    {
                        self.share_peers();
                    }
                    self.shared.indexing.send_modify(|n| *n = n.saturating_sub(1));
                    if *self.shared.indexing.borrow() == 0 {
                        self.embedding_full_warned = false;
                    }
                }
                () = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now).into()), if wake.is_some() => self.tick(),
            }
        }
    }

    /// The next time something is due: a call's end or a correction.
    fn next_wake(&self) -> Option<Instant> {
        self.pending
            .values()
            .map(|p| p.until)
            .chain(self.own_status.due)
            .chain(self.own_skills.due)
            .min()
    }

    fn tick(&mut self) {
        let now = Instant::now();
        self.pending.retain(|_, p| {
            // The caller has given up by now; this only clears the table.
            p.until > now
        });
        if self.own_status.take(now) {
            tracing::warn!("another client wrote this device's status; published it again");
            self.publish_status();
        }
        if self.own_skills.take(now) {
            tracing::warn!("another client wrote this device's registration; published it again");
            self.publish_registration();
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Republish => {
                if self.connected {
                    self.publish_registration();
                }
            }
            Command::Call {
                device_id,
                payload,
                until,
                reply,
            } => {
                if !self.connected {
                    let _ = reply.try_send(Err(
                        "not connected to the MQTT broker (it is retried in the background)".into(),
                    ));
                    return;
                }
                let mut id = [0u8; CORRELATION_BYTES];
                if let Err(e) = getrandom::fill(&mut id) {
                    let _ = reply.try_send(Err(format!(
                        "cannot make a correlation id for the call: the system's random source failed: {e}"
                    )));
                    return;
                }
                let properties = PublishProperties {
                    response_topic: Some(self.reply_topic.clone()),
                    correlation_data: Some(Bytes::copy_from_slice(&id)),
                    ..PublishProperties::default()
                };
                let sent = self.shared.client.try_publish_with_properties(
                    self.shared.settings.topics.rpc(&device_id),
                    QoS::AtLeastOnce,
                    false,
                    payload,
                    properties,
                );
                match sent {
                    Ok(()) => {
                        self.pending.insert(id, Pending { reply, until });
                    }
                    Err(e) => {
                        let _ = reply.try_send(Err(format!("cannot send the call: {e}")));
                    }
                }
            }
        }
    }

    /// Requests this role's subscriptions; returns how many SubAcks to expect.
    fn subscribe(&self) -> usize {
        let topics = &self.shared.settings.topics;
        // A spoke does not want its own status and registration back: whatever it
        // receives on them was written by someone else.
        let own = |path: String| Filter {
            nolocal: self.shared.is_spoke,
            ..Filter::new(path, QoS::AtLeastOnce)
        };
        let mut filters = vec![own(topics.all_status()), own(topics.all_skills())];
        if self.shared.is_spoke {
            filters.push(own(topics.all_wake()));
            filters.push(Filter::new(
                topics.rpc(&self.shared.settings.device_id),
                QoS::AtLeastOnce,
            ));
        }
        // The reply topic last: its SubAck means every retained message is in.
        filters.push(Filter::new(self.reply_topic.clone(), QoS::AtLeastOnce));
        let mut requested = 0;
        for filter in filters {
            let path = filter.path.clone();
            match self.shared.client.try_subscribe_many([filter]) {
                Ok(()) => requested += 1,
                Err(e) => tracing::error!(filter = %path, error = %e, "cannot subscribe"),
            }
        }
        requested
    }

    /// Publishes presence and registration (retained).
    fn announce(&mut self) {
        if self.server.is_some() {
            self.publish_status();
            self.publish_registration();
        }
    }

    fn publish_status(&self) {
        let status = self
            .shared
            .settings
            .topics
            .status(&self.shared.settings.device_id);
        if let Err(e) = self
            .shared
            .client
            .try_publish(status, QoS::AtLeastOnce, true, ONLINE)
        {
            tracing::error!(error = %e, "cannot publish the online status");
        }
    }

    fn publish_registration(&mut self) {
        let Some(server) = &self.server else {
            return;
        };
        let settings = &self.shared.settings;
        let registry = server.skills().current();
        let registration =
            Registration::of(&registry, &settings.device_id, &settings.device_name, |f| {
                settings.allow.permits(f)
            });
        let functions: usize = registration.classes.iter().map(|c| c.functions.len()).sum();
        let payload = match serde_json::to_vec(&registration) {
            Ok(p) => Bytes::from(p),
            Err(e) => {
                tracing::error!(error = %e, "cannot render the registration");
                return;
            }
        };
        match self.shared.client.try_publish(
            settings.topics.skills(&settings.device_id),
            QoS::AtLeastOnce,
            true,
            payload.clone(),
        ) {
            Ok(()) => {
                self.registration = Some(payload);
                tracing::info!(functions, "skills registered");
            }
            Err(e) => tracing::error!(error = %e, "cannot publish the registration"),
        }
    }

    /// The connection is gone: fail the calls in flight and forget who is online.
    fn lost(&mut self, why: &str) {
        self.connected = false;
        self.shared.ready.send_replace(false);
        self.peers.all_offline();
        self.share_peers();
        for (_, pending) in self.pending.drain() {
            let _ = pending.reply.try_send(Err(format!(
                "{why} while the call was in flight; it may or may not have run"
            )));
        }
    }

    /// Embeds device `id`'s newly registered skill text for search by meaning, off this
    /// task: a function takes tens of milliseconds, a household's registrations arriving
    /// at start take seconds, and this task must keep the connection, the calls and the
    /// wake arbitration going meanwhile. One registration at a time, so that meeting the
    /// household does not take every core; until it is done that peer's skills are
    /// found by their words ([`Link::wait_indexed`] waits for it). Text seen before is a
    /// cache hit.
    fn embed_registration(&mut self, id: &str) {
        let (Some(semantic), Some(classes)) = (
            self.shared.settings.search.semantic(),
            self.peers.classes(id),
        ) else {
            return;
        };
        if *self.shared.indexing.borrow() >= MAX_EMBEDDING_QUEUE {
            if !self.embedding_full_warned {
                self.embedding_full_warned = true;
                tracing::warn!(
                    device = id,
                    limit = MAX_EMBEDDING_QUEUE,
                    "too many skill registrations waiting to be embedded; newer ones are searched by their words"
                );
            }
            return;
        }
        let classes = classes.clone();
        let id = id.to_string();
        let done = self.indexed.0.clone();
        let turn = self.embedding.clone();
        self.shared.indexing.send_modify(|n| *n += 1);
        // Ends by itself: when the result is sent, or with the runtime.
        tokio::spawn(async move {
            let index = match turn.acquire_owned().await {
                Ok(_turn) => {
                    let text = classes.clone();
                    tokio::task::spawn_blocking(move || {
                        ClassIndex::build_with(&text, Some(semantic))
                    })
                    .await
                    .ok()
                }
                Err(_) => None,
            };
            let _ = done.send(Indexed { id, classes, index });
        });
    }

    fn share_peers(&self) {
        self.shared.peers.send_replace(Arc::new(self.peers.clone()));
    }

    fn dispatch(&mut self, publish: Publish) {
        let Ok(topic) = std::str::from_utf8(&publish.topic) else {
            return;
        };
        let settings = &self.shared.settings;
        let own = settings.device_id.as_str();
        match settings.topics.parse(topic) {
            Some(TopicKind::Status(id)) if id == own => self.own_status_seen(&publish.payload),
            Some(TopicKind::Skills(id)) if id == own => self.own_skills_seen(&publish.payload),
            Some(TopicKind::Status(id)) if valid_device_id(id) => {
                let outcome = self.peers.set_status(id, &publish.payload);
                match outcome {
                    Ok(()) => self.share_peers(),
                    Err(error) => self.refused(id, &error),
                }
            }
            Some(TopicKind::Skills(id)) if valid_device_id(id) => {
                let before = self.peers.classes(id).cloned();
                let outcome = self.peers.set_registration(id, &publish.payload);
                self.share_peers();
                let unchanged = before
                    .as_ref()
                    .zip(self.peers.classes(id))
                    .is_some_and(|(old, new)| Arc::ptr_eq(old, new));
                match outcome {
                    Ok(()) if unchanged => {}
                    Ok(()) => self.embed_registration(id),
                    Err(error) => self.refused(id, &error),
                }
            }
            Some(TopicKind::Rpc(id)) if id == own => {
                if let Some(server) = &self.server {
                    server.clone().accept(publish);
                }
            }
            Some(TopicKind::Replies(id)) if id == self.client_id => self.reply(&publish),
            Some(TopicKind::Wake(id)) if id != own && valid_device_id(id) => {
                if let Some(claim) = WakeClaim::parse(&publish.payload) {
                    let _ = self
                        .shared
                        .wake
                        .send((id.to_string(), claim, Instant::now()));
                }
            }
            _ => {}
        }
    }

    /// Someone else wrote this spoke's status (it does not receive its own): unless it
    /// says what this spoke says, put it right.
    fn own_status_seen(&mut self, payload: &[u8]) {
        if self.connected && self.server.is_some() && payload != ONLINE.as_bytes() {
            self.own_status.request(Instant::now());
        }
    }

    /// Someone else wrote this spoke's registration: unless it is the one this spoke
    /// published, put it right.
    fn own_skills_seen(&mut self, payload: &Bytes) {
        if self.connected && self.server.is_some() && self.registration.as_ref() != Some(payload) {
            self.own_skills.request(Instant::now());
        }
    }

    /// Reports a refused registration or device, naming the device and the limit; a
    /// full registry is reported once, not for each further device id.
    fn refused(&mut self, id: &str, error: &RegistrationError) {
        if matches!(error, RegistrationError::TooManyPeers { .. }) {
            if std::mem::replace(&mut self.peers_full_warned, true) {
                tracing::debug!(device = id, %error, "ignored a device");
                return;
            }
            tracing::warn!(device = id, %error, "ignored a device, and will ignore further new ones");
            return;
        }
        let mut text = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            text = format!("{text}: {cause}");
            source = cause.source();
        }
        tracing::warn!(device = id, error = %text, "refused a registration; the device's previous one, if any, stays");
    }

    fn reply(&mut self, publish: &Publish) {
        let id = publish
            .properties
            .as_ref()
            .and_then(|p| p.correlation_data.as_ref())
            .and_then(|c| <[u8; CORRELATION_BYTES]>::try_from(c.as_ref()).ok());
        // Anyone may publish here: only the answer to a call still waiting counts, and
        // the rest is not worth a log line each.
        let Some(pending) = id.and_then(|id| self.pending.remove(&id)) else {
            tracing::debug!("an answer that matches no call in flight was ignored");
            return;
        };
        let outcome = match serde_json::from_slice::<CallResponse>(&publish.payload) {
            Ok(response) => response.into_result().map_err(|e| clean_text(&e)),
            Err(e) => Err(format!("the remote device sent a malformed answer: {e}")),
        };
        let _ = pending.reply.try_send(outcome);
    }
}
