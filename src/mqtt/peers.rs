//! What this spoke knows about the other spokes, from their retained messages.
//!
//! Status and registration arrive separately and in any order (a retained
//! registration can outlive its device's `online`), so a peer is kept as soon as
//! either is seen and is callable only while both say so.

use std::collections::BTreeMap;

use crate::device::normalise;
use crate::skills::{Example, SkillFunction};

use super::protocol::{OFFLINE, ONLINE, Registration};

/// One remote skill class as its device registered it.
#[derive(Debug, Clone)]
pub struct RemoteClass {
    /// The class name.
    pub name: String,
    /// Its summary.
    pub summary: String,
    /// The rest of its prose.
    pub description: String,
    /// Its examples.
    pub examples: Vec<Example>,
    /// The functions the device lets others call.
    pub functions: Vec<SkillFunction>,
}

crate::skills::search::impl_class_text!(RemoteClass);

/// Another spoke.
#[derive(Debug, Clone, Default)]
pub struct Peer {
    /// Its device id (topic level).
    pub id: String,
    /// Its display name (the id until a registration says otherwise).
    pub name: String,
    /// Whether its retained status is `online`.
    pub online: bool,
    /// Its registered classes.
    pub classes: Vec<RemoteClass>,
}

impl Peer {
    /// Whether `name` designates this peer: its normalised display name or its id.
    pub fn answers_to(&self, name: &str) -> bool {
        let wanted = normalise(name);
        !wanted.is_empty() && (wanted == normalise(&self.name) || name == self.id)
    }

    /// The function `class.function`, when registered.
    pub fn function(&self, class: &str, function: &str) -> Option<&SkillFunction> {
        self.classes
            .iter()
            .find(|c| c.name == class)
            .and_then(|c| c.functions.iter().find(|f| f.name == function))
    }
}

/// Every other spoke seen, by device id.
#[derive(Debug, Default)]
pub struct Peers {
    peers: BTreeMap<String, Peer>,
}

impl Peers {
    /// Applies a status payload; anything but `online` counts as offline.
    pub fn set_status(&mut self, id: &str, payload: &[u8]) {
        let online = payload == ONLINE.as_bytes();
        if payload.is_empty() {
            // A cleared retained status: the device was removed.
            if let Some(peer) = self.peers.get_mut(id) {
                peer.online = false;
            }
            return;
        }
        if payload != OFFLINE.as_bytes() && !online {
            tracing::warn!(device = id, "unknown status payload; taken as offline");
        }
        self.entry(id).online = online;
    }

    /// Applies a registration payload; an empty one (cleared retained message)
    /// removes the device's skills. Returns a message when the payload is unusable.
    pub fn set_registration(&mut self, id: &str, payload: &[u8]) -> Result<(), String> {
        if payload.is_empty() {
            self.entry(id).classes.clear();
            return Ok(());
        }
        let registration: Registration =
            serde_json::from_slice(payload).map_err(|e| format!("malformed registration: {e}"))?;
        if registration.device_id != id {
            return Err(format!(
                "registration names device `{}` but was published for `{id}`",
                registration.device_id
            ));
        }
        let mut classes = Vec::new();
        for class in &registration.classes {
            let mut functions = Vec::new();
            for f in &class.functions {
                match f.to_function(&class.name) {
                    Some(function) => functions.push(function),
                    None => tracing::warn!(
                        device = id,
                        function = %format!("{}.{}", class.name, f.name),
                        "registration uses an unknown type; function ignored"
                    ),
                }
            }
            classes.push(RemoteClass {
                name: class.name.clone(),
                summary: class.summary.clone(),
                description: class.description.clone(),
                examples: class.examples.iter().map(|e| e.to_example()).collect(),
                functions,
            });
        }
        let peer = self.entry(id);
        peer.name = registration.name;
        peer.classes = classes;
        Ok(())
    }

    fn entry(&mut self, id: &str) -> &mut Peer {
        self.peers.entry(id.to_string()).or_insert_with(|| Peer {
            id: id.to_string(),
            name: id.to_string(),
            ..Peer::default()
        })
    }

    /// Every peer, by id.
    pub fn all(&self) -> impl Iterator<Item = &Peer> {
        self.peers.values()
    }

    /// Marks everyone offline: while this spoke is disconnected it knows nothing.
    pub fn all_offline(&mut self) {
        for peer in self.peers.values_mut() {
            peer.online = false;
        }
    }
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
    fn registration_and_status_make_a_callable_peer() {
        let mut peers = Peers::default();
        peers.set_registration("tv1", REG.as_bytes()).unwrap();
        peers.set_status("tv1", b"online");
        let peer = peers.all().next().unwrap();
        assert!(peer.online && peer.answers_to("living room tv") && peer.answers_to("tv1"));
        assert!(peer.function("VolumeSkill", "set").is_some());
        // The function with an unknown type is dropped, the rest stays.
        assert!(peer.function("VolumeSkill", "odd").is_none());
        peers.set_status("tv1", b"offline");
        assert!(!peers.all().next().unwrap().online);
    }

    #[test]
    fn registration_for_another_id_is_refused() {
        let mut peers = Peers::default();
        let err = peers.set_registration("other", REG.as_bytes()).unwrap_err();
        assert!(err.contains("tv1"), "{err}");
        assert!(peers.set_registration("x", b"{not json").is_err());
    }
}
