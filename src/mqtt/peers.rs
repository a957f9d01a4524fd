//! What this spoke knows about the other spokes, from their retained messages.
//!
//! Status and registration arrive separately and in any order (a retained
//! registration can outlive its device's `online`), so a peer is kept as soon as
//! either is seen and is callable only while both say so.
//!
//! Anyone on the broker can publish under any device id, so a registration is
//! untrusted input: it is refused whole when it is over a limit ([`PeerLimits`]) or
//! claims a name another device already has (`devices["kitchen"]` must mean one
//! device, the one that had the name first); its text is stripped of control
//! characters once, and indexed for search once, when it arrives. The connection task
//! owns the registry and hands readers immutable snapshots, so a search never holds up
//! the network.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::skills::search::ClassIndex;
use crate::skills::{ClassDoc, Example, SkillFunction};
use crate::text::normalise;
use crate::text::{clean_line, clean_text};

use super::protocol::{ClassEntry, OFFLINE, ONLINE, Registration, valid_identifier};
use super::settings::PeerLimits;

/// Another spoke.
#[derive(Debug, Clone, Default)]
pub struct Peer {
    /// Its device id (topic level).
    pub id: String,
    /// Its display name (the id until a registration says otherwise).
    pub name: String,
    /// Whether its retained status is `online`.
    pub online: bool,
    /// Whether a registration of it was accepted (its name is then its own).
    pub registered: bool,
    /// Its registered classes.
    pub classes: Arc<Vec<ClassDoc>>,
    /// The search index of `classes`, built when they arrived.
    pub index: Arc<ClassIndex>,
}

impl Peer {
    /// The key `devices["..."]` reaches it by ([`Peers::resolve`]): its normalised
    /// name, or its id while it has no registered name.
    pub fn key(&self) -> String {
        let key = normalise(&self.name);
        if self.registered && !key.is_empty() {
            key
        } else {
            self.id.clone()
        }
    }

    /// The function `class.function`, when registered.
    pub fn function(&self, class: &str, function: &str) -> Option<&SkillFunction> {
        self.classes
            .iter()
            .find(|c| c.name == class)
            .and_then(|c| c.function(function))
    }
}

/// Why a registration or a device was not taken in.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// Over `mqtt.max_registration_bytes`.
    #[error(
        "the registration is {bytes} bytes, over the limit of {limit} (mqtt.max_registration_bytes)"
    )]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Not a registration.
    #[error("malformed registration")]
    Malformed(#[source] serde_json::Error),
    /// Published under another device's id.
    #[error("the registration names device `{named}` but was published for `{id}`")]
    WrongDevice {
        /// The id inside.
        named: String,
        /// The id of the topic.
        id: String,
    },
    /// Something in it is over a limit.
    #[error("{what} has {found} {unit}, over the limit of {limit} ({key})")]
    OverLimit {
        /// What is too big.
        what: String,
        /// How big it is.
        found: usize,
        /// What is counted.
        unit: &'static str,
        /// The limit.
        limit: usize,
        /// The configuration key of the limit.
        key: &'static str,
    },
    /// A class, function or parameter name that is not an identifier.
    #[error(
        "`{name}` is not a valid {what} name (letters, digits and `_`, not starting with a digit)"
    )]
    BadName {
        /// Class, function or parameter.
        what: &'static str,
        /// The name, stripped of control characters and shortened.
        name: String,
    },
    /// The display name is another device's.
    #[error(
        "the name `{name}` is already taken by {holder}; one of the two must change device.name"
    )]
    NameTaken {
        /// The normalised name.
        name: String,
        /// Who has it.
        holder: String,
    },
    /// `mqtt.max_peers` devices are already known.
    #[error("{limit} other devices are already known, the limit (mqtt.max_peers)")]
    TooManyPeers {
        /// The limit.
        limit: usize,
    },
}

/// Every other spoke seen, by device id, and the registrations refused.
#[derive(Debug, Clone, Default)]
pub struct Peers {
    own_name: String,
    limits: PeerLimits,
    peers: BTreeMap<String, Peer>,
    refused: BTreeMap<String, Arc<RegistrationError>>,
}

impl Peers {
    /// An empty registry for a device called `own_name` (a name no peer may take).
    pub fn new(own_name: &str, limits: PeerLimits) -> Peers {
        Peers {
            own_name: normalise(own_name),
            limits,
            ..Peers::default()
        }
    }

    /// Applies a status payload; anything but `online` counts as offline.
    pub fn set_status(&mut self, id: &str, payload: &[u8]) -> Result<(), RegistrationError> {
        let online = payload == ONLINE.as_bytes();
        if payload.is_empty() {
            // A cleared retained status: the device was removed.
            if let Some(peer) = self.peers.get_mut(id) {
                peer.online = false;
            }
            return Ok(());
        }
        if payload != OFFLINE.as_bytes() && !online {
            tracing::warn!(device = id, "unknown status payload; taken as offline");
        }
        self.entry(id)?.online = online;
        Ok(())
    }

    /// Applies a registration payload; an empty one (cleared retained message)
    /// removes the device's skills and frees its name. A refused registration leaves
    /// the device's previous one in place and is kept as its [`Peers::refusal`].
    pub fn set_registration(
        &mut self,
        id: &str,
        payload: &[u8],
    ) -> Result<(), Arc<RegistrationError>> {
        let outcome = self.registration(id, payload);
        match outcome {
            Ok(()) => {
                self.refused.remove(id);
                Ok(())
            }
            Err(error) => {
                let error = Arc::new(error);
                if self.refused.contains_key(id) || self.refused.len() < self.limits.peers {
                    self.refused.insert(id.to_string(), error.clone());
                }
                Err(error)
            }
        }
    }

    fn registration(&mut self, id: &str, payload: &[u8]) -> Result<(), RegistrationError> {
        if payload.is_empty() {
            let peer = self.entry(id)?;
            peer.classes = Arc::default();
            peer.index = Arc::default();
            peer.name = id.to_string();
            peer.registered = false;
            return Ok(());
        }
        let limits = &self.limits;
        if payload.len() > limits.registration_bytes {
            return Err(RegistrationError::TooLarge {
                bytes: payload.len(),
                limit: limits.registration_bytes,
            });
        }
        let registration: Registration =
            serde_json::from_slice(payload).map_err(RegistrationError::Malformed)?;
        if registration.device_id != id {
            return Err(RegistrationError::WrongDevice {
                named: shorten(&registration.device_id),
                id: id.to_string(),
            });
        }
        check(&registration, limits)?;
        let name = clean_line(&registration.name);
        let wanted = normalise(&name);
        if !wanted.is_empty() {
            let holder = if wanted == self.own_name {
                Some("this device".to_string())
            } else {
                self.peers
                    .values()
                    .find(|p| p.id != id && p.registered && normalise(&p.name) == wanted)
                    .map(|p| format!("device `{}`", p.id))
            };
            if let Some(holder) = holder {
                return Err(RegistrationError::NameTaken {
                    name: wanted,
                    holder,
                });
            }
        }
        let classes: Vec<ClassDoc> = registration
            .classes
            .iter()
            .map(|class| remote_class(id, class))
            .collect();
        let peer = self.entry(id)?;
        peer.name = name;
        peer.registered = true;
        // The same skills again (the peer reconnected, the broker restarted): its index,
        // embeddings included, stays.
        if *peer.classes != classes {
            // Words only, at once: embedding the text for search by meaning takes tens of
            // milliseconds a function, so the owner of these peers does it elsewhere and
            // hands the result to `set_index`.
            let index = ClassIndex::build_with(&classes, None);
            peer.classes = Arc::new(classes);
            peer.index = Arc::new(index);
        }
        Ok(())
    }

    fn entry(&mut self, id: &str) -> Result<&mut Peer, RegistrationError> {
        if !self.peers.contains_key(id) && self.peers.len() >= self.limits.peers {
            return Err(RegistrationError::TooManyPeers {
                limit: self.limits.peers,
            });
        }
        Ok(self.peers.entry(id.to_string()).or_insert_with(|| Peer {
            id: id.to_string(),
            name: id.to_string(),
            ..Peer::default()
        }))
    }

    /// Replaces device `id`'s search index with `index`, built from `classes`, unless
    /// the device has registered other classes since. Whether it was taken.
    pub fn set_index(&mut self, id: &str, classes: &Arc<Vec<ClassDoc>>, index: ClassIndex) -> bool {
        match self.peers.get_mut(id) {
            Some(peer) if Arc::ptr_eq(&peer.classes, classes) => {
                peer.index = Arc::new(index);
                true
            }
            _ => false,
        }
    }

    /// The registered classes of device `id`, if it has any.
    pub fn classes(&self, id: &str) -> Option<&Arc<Vec<ClassDoc>>> {
        self.peers
            .get(id)
            .map(|p| &p.classes)
            .filter(|c| !c.is_empty())
    }

    /// Every peer, by id.
    pub fn all(&self) -> impl Iterator<Item = &Peer> {
        self.peers.values()
    }

    /// The peer `devices[name]` means: the one whose display name normalises to the
    /// same as `name` (names are unique), else the one with that id.
    pub fn resolve(&self, name: &str) -> Option<&Peer> {
        let wanted = normalise(name);
        if wanted.is_empty() {
            return None;
        }
        self.peers
            .values()
            .find(|p| p.registered && normalise(&p.name) == wanted)
            .or_else(|| self.peers.get(name))
    }

    /// Why the last registration published under `id` was refused, while it is.
    pub fn refusal(&self, id: &str) -> Option<&RegistrationError> {
        self.refused.get(id).map(|e| &**e)
    }

    /// Marks everyone offline: while this spoke is disconnected it knows nothing.
    pub fn all_offline(&mut self) {
        for peer in self.peers.values_mut() {
            peer.online = false;
        }
    }
}

/// Checks a parsed registration against the limits before anything of it is kept.
fn check(registration: &Registration, limits: &PeerLimits) -> Result<(), RegistrationError> {
    let over = |what: &dyn Fn() -> String,
                found: usize,
                unit: &'static str,
                limit: usize,
                key: &'static str| {
        if found > limit {
            Err(RegistrationError::OverLimit {
                what: what(),
                found,
                unit,
                limit,
                key,
            })
        } else {
            Ok(())
        }
    };
    let name = |what: &'static str, name: &str| {
        over(
            &|| format!("a {what} name"),
            name.len(),
            "bytes",
            limits.name_bytes,
            "mqtt.max_name_bytes",
        )?;
        if valid_identifier(name) {
            Ok(())
        } else {
            Err(RegistrationError::BadName {
                what,
                name: shorten(name),
            })
        }
    };
    const NAME: &str = "mqtt.max_name_bytes";
    const SUMMARY: &str = "mqtt.max_summary_bytes";
    const TEXT: &str = "mqtt.max_text_bytes";
    let classes = &registration.classes;
    over(
        &|| "the device name".into(),
        registration.name.len(),
        "bytes",
        limits.name_bytes,
        NAME,
    )?;
    over(
        &|| "the registration".into(),
        classes.len(),
        "classes",
        limits.classes,
        "mqtt.max_classes_per_peer",
    )?;
    over(
        &|| "the registration".into(),
        classes.iter().map(|c| c.functions.len()).sum(),
        "functions",
        limits.functions,
        "mqtt.max_functions_per_peer",
    )?;
    over(
        &|| "the registration".into(),
        classes
            .iter()
            .flat_map(|c| &c.functions)
            .map(|f| f.requests.len())
            .sum(),
        "`@request` lines",
        limits.requests,
        "mqtt.max_requests_per_peer",
    )?;
    for class in classes {
        name("class", &class.name)?;
        let of = |field: &'static str| move || format!("the {field} of class `{}`", class.name);
        over(
            &of("summary"),
            class.summary.len(),
            "bytes",
            limits.summary_bytes,
            SUMMARY,
        )?;
        over(
            &of("description"),
            class.description.len(),
            "bytes",
            limits.text_bytes,
            TEXT,
        )?;
        for example in &class.examples {
            over(
                &of("example request"),
                example.request.len(),
                "bytes",
                limits.summary_bytes,
                SUMMARY,
            )?;
            over(
                &of("example code"),
                example.code.len(),
                "bytes",
                limits.text_bytes,
                TEXT,
            )?;
        }
        for f in &class.functions {
            name("function", &f.name)?;
            let of =
                |field: &'static str| move || format!("the {field} of {}.{}", class.name, f.name);
            over(
                &of("signature"),
                f.signature.len(),
                "bytes",
                limits.summary_bytes,
                SUMMARY,
            )?;
            over(
                &of("summary"),
                f.summary.len(),
                "bytes",
                limits.summary_bytes,
                SUMMARY,
            )?;
            over(
                &of("docstring"),
                f.docstring.len(),
                "bytes",
                limits.text_bytes,
                TEXT,
            )?;
            over(
                &of("return type"),
                f.returns.len(),
                "bytes",
                limits.name_bytes,
                NAME,
            )?;
            for p in &f.params {
                name("parameter", &p.name)?;
                over(
                    &of("parameter type"),
                    p.ty.len(),
                    "bytes",
                    limits.name_bytes,
                    NAME,
                )?;
                over(
                    &of("parameter description"),
                    p.description.len(),
                    "bytes",
                    limits.summary_bytes,
                    SUMMARY,
                )?;
            }
        }
    }
    Ok(())
}

/// A checked class as this spoke keeps it: text stripped of control characters,
/// functions with unknown types dropped (a newer or broken publisher).
fn remote_class(id: &str, class: &ClassEntry) -> ClassDoc {
    let functions = class
        .functions
        .iter()
        .filter_map(|f| {
            let function = f.to_function(&class.name);
            if function.is_none() {
                tracing::warn!(
                    device = id,
                    function = %format!("{}.{}", class.name, f.name),
                    "registration uses an unknown type; function ignored"
                );
            }
            function
        })
        .map(|mut f| {
            f.summary = clean_text(&f.summary);
            f.docstring = clean_text(&f.docstring);
            // Cleaned, then blank and repeated ones dropped: each costs an embedding,
            // and an empty text would match every request a little.
            let mut requests: Vec<String> = Vec::new();
            for request in f.requests.iter().map(|r| clean_text(r).trim().to_string()) {
                if !request.is_empty() && !requests.contains(&request) {
                    requests.push(request);
                }
            }
            f.requests = requests;
            for p in &mut f.params {
                p.description = clean_text(&p.description);
            }
            f
        })
        .collect();
    ClassDoc {
        name: class.name.clone(),
        summary: clean_text(&class.summary),
        description: clean_text(&class.description),
        examples: class
            .examples
            .iter()
            .map(|e| Example {
                request: clean_text(&e.request),
                code: clean_text(&e.code),
            })
            .collect(),
        functions,
    }
}

/// Untrusted text for an error message: one line, at most 64 characters.
fn shorten(text: &str) -> String {
    clean_line(text).chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const REG: &str = r#"{"schema":1,"device_id":"tv1","name":"Living Room TV","classes":[
        {"name":"VolumeSkill","summary":"Volume.","functions":[
          {"name":"set","signature":"set(level: int) -> int","summary":"Set it.",
           "params":[{"name":"level","type":"int"}],"returns":"int"},
          {"name":"odd","signature":"odd(x: blob) -> int","summary":"?",
           "params":[{"name":"x","type":"blob"}],"returns":"int"}]}]}"#;

    #[test]
    fn the_same_registration_again_keeps_its_index() {
        let mut peers = Peers::new("Kitchen", PeerLimits::default());
        peers.set_registration("tv1", REG.as_bytes()).unwrap();
        let first = peers.all().next().unwrap().index.clone();
        peers.set_registration("tv1", REG.as_bytes()).unwrap();
        assert!(Arc::ptr_eq(&first, &peers.all().next().unwrap().index));
        let other = REG.replace("Set it.", "Set the volume.");
        assert_ne!(other, REG);
        peers.set_registration("tv1", other.as_bytes()).unwrap();
        assert!(!Arc::ptr_eq(&first, &peers.all().next().unwrap().index));
    }

    #[test]
    fn registration_and_status_make_a_callable_peer() {
        let mut peers = Peers::new("Kitchen", PeerLimits::default());
        peers.set_registration("tv1", REG.as_bytes()).unwrap();
        peers.set_status("tv1", b"online").unwrap();
        let peer = peers.all().next().unwrap();
        assert!(peer.online && peer.registered);
        assert_eq!(peers.resolve("living room tv").unwrap().id, "tv1");
        assert_eq!(peers.resolve("tv1").unwrap().id, "tv1");
        assert!(peer.function("VolumeSkill", "set").is_some());
        // The function with an unknown type is dropped, the rest stays.
        assert!(peer.function("VolumeSkill", "odd").is_none());
        peers.set_status("tv1", b"offline").unwrap();
        assert!(!peers.all().next().unwrap().online);
    }

    #[test]
    fn a_peer_s_requests_are_kept_clean() {
        let mut peers = Peers::new("Kitchen", PeerLimits::default());
        let reg = REG.replace(
            r#""summary":"Set it.","#,
            r#""summary":"Set it.","requests":["make it louder\u001b[2J","turn it up"," ","turn it up"],"#,
        );
        assert_ne!(reg, REG);
        peers.set_registration("tv1", reg.as_bytes()).unwrap();
        let peer = peers.all().next().unwrap();
        let set = peer.function("VolumeSkill", "set").unwrap();
        assert_eq!(set.requests, ["make it louder[2J", "turn it up"]);
        // Past mqtt.max_requests_per_peer the registration is refused whole.
        let mut few = Peers::new(
            "Kitchen",
            PeerLimits {
                requests: 3,
                ..PeerLimits::default()
            },
        );
        let err = few.set_registration("tv1", reg.as_bytes()).unwrap_err();
        match &*err {
            RegistrationError::OverLimit { found, key, .. } => {
                assert_eq!((*found, *key), (4, "mqtt.max_requests_per_peer"));
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn registration_for_another_id_is_refused() {
        let mut peers = Peers::default();
        let err = peers.set_registration("other", REG.as_bytes()).unwrap_err();
        assert!(
            matches!(*err, RegistrationError::WrongDevice { .. }),
            "{err}"
        );
        assert!(peers.set_registration("x", b"{not json").is_err());
        assert!(peers.refusal("x").is_some());
    }

    #[test]
    fn limits_refuse_the_whole_registration_and_keep_the_previous_one() {
        let limits = PeerLimits {
            functions: 1,
            ..PeerLimits::default()
        };
        let mut peers = Peers::new("Kitchen", limits);
        let mut one: serde_json::Value = serde_json::from_str(REG).unwrap();
        one["classes"][0]["functions"].as_array_mut().unwrap().pop();
        let one = one.to_string();
        peers.set_registration("tv1", one.as_bytes()).unwrap();
        let err = peers.set_registration("tv1", REG.as_bytes()).unwrap_err();
        match &*err {
            RegistrationError::OverLimit { found, key, .. } => {
                assert_eq!((*found, *key), (2, "mqtt.max_functions_per_peer"));
            }
            other => panic!("{other}"),
        }
        assert!(peers.refusal("tv1").is_some());
        let peer = peers.all().next().unwrap();
        assert!(peer.function("VolumeSkill", "set").is_some());
        let long = one.replace("\"Volume.\"", &format!("\"{}\"", "v".repeat(2000)));
        let err = peers.set_registration("tv1", long.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("mqtt.max_summary_bytes"), "{err}");
        let big = Peers::new(
            "k",
            PeerLimits {
                registration_bytes: 10,
                ..PeerLimits::default()
            },
        )
        .set_registration("tv1", REG.as_bytes())
        .unwrap_err();
        assert!(
            big.to_string().contains("mqtt.max_registration_bytes"),
            "{big}"
        );
    }

    #[test]
    fn a_taken_name_is_refused() {
        let mut peers = Peers::new("Kitchen", PeerLimits::default());
        peers.set_registration("tv1", REG.as_bytes()).unwrap();
        let impostor = REG.replace("\"tv1\"", "\"aaa\"");
        let err = peers
            .set_registration("aaa", impostor.as_bytes())
            .unwrap_err();
        assert!(err.to_string().contains("`tv1`"), "{err}");
        let own = REG
            .replace("Living Room TV", "KITCHEN")
            .replace("\"tv1\"", "\"bbb\"");
        let err = peers.set_registration("bbb", own.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("this device"), "{err}");
        assert_eq!(peers.resolve("Living Room TV").unwrap().id, "tv1");
        // Freed when the holder's registration is cleared.
        peers.set_registration("tv1", b"").unwrap();
        peers.set_registration("aaa", impostor.as_bytes()).unwrap();
        assert_eq!(peers.resolve("living-room-tv").unwrap().id, "aaa");
    }

    #[test]
    fn peer_text_loses_control_characters() {
        let mut peers = Peers::default();
        let evil = REG
            .replace("Living Room TV", "TV\\u001b]0;x\\u0007")
            .replace("\"Volume.\"", "\"Vol\\u001b[2Jume\\u202e.\"");
        peers.set_registration("tv1", evil.as_bytes()).unwrap();
        let peer = peers.all().next().unwrap();
        assert_eq!(peer.name, "TV]0;x");
        assert_eq!(peer.classes[0].summary, "Vol[2Jume.");
        let bad = REG.replace("\"VolumeSkill\"", "\"Volume\\u001bSkill\"");
        let err = peers.set_registration("tv1", bad.as_bytes()).unwrap_err();
        assert!(matches!(*err, RegistrationError::BadName { .. }), "{err}");
    }

    #[test]
    fn peers_are_bounded() {
        let mut peers = Peers::new(
            "k",
            PeerLimits {
                peers: 2,
                ..PeerLimits::default()
            },
        );
        peers.set_status("a", b"online").unwrap();
        peers.set_status("b", b"online").unwrap();
        assert!(peers.set_status("c", b"online").is_err());
        assert!(peers.set_status("a", b"offline").is_ok());
        assert_eq!(peers.all().count(), 2);
    }
}
