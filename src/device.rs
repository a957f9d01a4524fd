//! The `device` object model-written code sees (docs/architecture.md, "The `device`
//! object"), wired to the skills.
//!
//! The sandbox only ferries [`DeviceRequest`]s across; this is where they get their
//! meaning: which device a call goes to, and what search and info say. Whether a call
//! may run (`@no_model`, `@confirm`) is [`crate::skills::policy`]'s decision, the same
//! one the MQTT server applies to other devices' calls. Every error is a sentence the
//! model can act on, because it reads them and tries again.
//!
//! With an MQTT [`Link`], skills of other spokes join the local ones (same section):
//! search lists each distinct skill once with the devices that host it (this device
//! first) and those of them online, offline ones included so the model can say where a
//! skill is even when it cannot reach it now; class and function info say the same.
//! A call goes to this device when it hosts the skill, else to the one online device
//! that does, else fails naming the candidates. Without a link every answer names this
//! device alone.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::mqtt::Link;
use crate::mqtt::peers::{Peer, Peers};
use crate::sandbox::{DeviceHandler, DeviceRequest};
use crate::skills::policy::{AllowList, Caller, Confirm, Policy};
use crate::skills::search::Doc;
use crate::skills::watch::LiveRegistry;
use crate::skills::{Registry, SkillFunction};
use crate::text::normalise;

/// How many results `device.search_skills` returns at most.
const SEARCH_LIMIT: usize = 20;

/// The `device` API of this spoke.
pub struct Device {
    name: String,
    registry: Arc<LiveRegistry>,
    policy: Policy,
    link: Option<Link>,
}

impl Device {
    /// A `device` named `name` (as other spokes and `devices["..."]` know it) over
    /// `registry`, asking `confirm` before `@confirm` functions run.
    pub fn new(
        name: impl Into<String>,
        registry: Arc<Registry>,
        confirm: Arc<dyn Confirm>,
    ) -> Self {
        Device::live(name, Arc::new(LiveRegistry::new(registry)), confirm)
    }

    /// Like [`Device::new`] over a registry that hot reload keeps current.
    pub fn live(
        name: impl Into<String>,
        registry: Arc<LiveRegistry>,
        confirm: Arc<dyn Confirm>,
    ) -> Self {
        let name = name.into();
        Device {
            // Model code is not a peer: what this device opened to others is the
            // MQTT server's business, so the allow list here is empty.
            policy: Policy::new(name.clone(), AllowList::default(), confirm),
            name,
            registry,
            link: None,
        }
    }

    /// Adds the skills of other spokes reachable through `link`.
    pub fn with_link(mut self, link: Link) -> Self {
        self.link = Some(link);
        self
    }

    fn search(&self, query: &str) -> Value {
        let registry = self.registry.current();
        if let Some(link) = &self.link {
            return self.search_everywhere(&registry, &link.peers(), query);
        }
        let hits = registry
            .search(query, usize::MAX)
            .into_iter()
            .filter(|hit| hit.function.model_callable)
            .take(SEARCH_LIMIT)
            .map(|hit| {
                let f = hit.function;
                json!({
                    "name": f.qualified_name(),
                    "class": f.class,
                    "signature": f.signature(),
                    "summary": f.summary,
                    "devices": [self.name],
                    "online": [self.name],
                })
            })
            .collect();
        Value::Array(hits)
    }

    /// Search over this device's skills and those of every device that registered
    /// some, online or not: one entry per class, function and signature, listing its
    /// devices (this one first) and which of them are online. An offline device's
    /// skills stay findable so the model can tell the person where the skill is and
    /// that it cannot be reached now, rather than search on. Reads the indexes built
    /// when the skills loaded or arrived and a snapshot of the peers: the work is
    /// linear in the functions, and the connection is never held up.
    fn search_everywhere(&self, registry: &Registry, peers: &Peers, query: &str) -> Value {
        let places = Places::new(&self.name, registry, Some(peers));
        let mut found = Found::default();
        for (ci, class) in registry.classes().iter().enumerate() {
            for (fi, f) in class.functions.iter().enumerate() {
                if f.model_callable {
                    found.add(registry.index().doc(ci, fi), f, &self.name, true, true);
                }
            }
        }
        for peer in &places.peers {
            for (ci, class) in peer.classes.iter().enumerate() {
                for (fi, f) in class.functions.iter().enumerate() {
                    found.add(peer.index.doc(ci, fi), f, &peer.name, false, peer.online);
                }
            }
        }
        let scores = crate::skills::search::score(&found.docs, query);
        let everything = crate::skills::search::query_is_empty(query);
        let mut ranked: Vec<(f32, &Entry<'_>)> = scores
            .into_iter()
            .zip(&found.entries)
            .filter(|(score, _)| everything || *score > 0.0)
            .collect();
        // Best first; among equals, skills this device hosts first, then those some
        // online device has, then by name.
        ranked.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then(b.1.local.cmp(&a.1.local))
                .then(a.1.online.is_empty().cmp(&b.1.online.is_empty()))
                .then_with(|| {
                    (&a.1.function.class, &a.1.function.name)
                        .cmp(&(&b.1.function.class, &b.1.function.name))
                })
        });
        Value::Array(
            ranked
                .into_iter()
                .take(SEARCH_LIMIT)
                .map(|(_, entry)| {
                    let f = entry.function;
                    json!({
                        "name": f.qualified_name(),
                        "class": f.class,
                        "signature": entry.signature,
                        "summary": f.summary,
                        "devices": entry.devices,
                        "online": entry.online,
                    })
                })
                .collect(),
        )
    }

    /// `device.get_skill_info`: the class as this device has it, else as an online
    /// device has it, else as any device that registered it; with where it is.
    fn skill_info(&self, class: &str) -> Result<Value, String> {
        let registry = self.registry.current();
        let peers = self.link.as_ref().map(Link::peers);
        let places = Places::new(&self.name, &registry, peers.as_deref());
        if let Some(skill) = registry.class(class) {
            let functions = skill.functions.iter().filter(|f| f.model_callable);
            return Ok(places.class_info(
                &skill.name,
                &skill.summary,
                &skill.description,
                functions,
            ));
        }
        places
            .remote(|peer| peer.classes.iter().find(|c| c.name == class))
            .map(|c| places.class_info(&c.name, &c.summary, &c.description, c.functions.iter()))
            .ok_or_else(|| unknown_class(&registry, class))
    }

    fn function_info(&self, name: &str) -> Result<Value, String> {
        let registry = self.registry.current();
        let peers = self.link.as_ref().map(Link::peers);
        let places = Places::new(&self.name, &registry, peers.as_deref());
        let f = match registry.function(name) {
            Ok(f) => f,
            Err(error) => {
                let remote = name.split_once('.').and_then(|(class, function)| {
                    places.remote(|peer| peer.function(class, function))
                });
                return remote
                    .map(|f| places.function_info(f))
                    .ok_or_else(|| error.to_string());
            }
        };
        if !f.model_callable {
            return Err(format!(
                "{} is not available to scripts",
                f.qualified_name()
            ));
        }
        Ok(places.function_info(f))
    }

    fn call(
        &self,
        device: Option<&str>,
        class: &str,
        function: &str,
        args: &[Value],
    ) -> Result<Value, String> {
        if let (Some(link), Some(target)) = (&self.link, device)
            && normalise(target) != normalise(&self.name)
        {
            return self.call_named(link, target, class, function, args);
        }
        if let Some(link) = &self.link
            && device.is_none()
        {
            let registry = self.registry.current();
            let here = registry
                .class(class)
                .and_then(|c| c.function(function))
                .is_some();
            if !here && let Some(outcome) = self.call_anywhere(link, class, function, args) {
                return outcome;
            }
        }
        if let Some(target) = device
            && normalise(target) != normalise(&self.name)
        {
            return Err(format!(
                "no device named `{target}` is reachable; this device is `{}` (use devices[\"{}\"] or just device)",
                self.name,
                normalise(&self.name)
            ));
        }
        let qualified = format!("{class}.{function}");
        let registry = self.registry.current();
        let f = registry.function(&qualified).map_err(|e| e.to_string())?;
        self.policy
            .admit(f, args, Caller::Model)
            .map_err(|e| e.to_string())?;
        registry
            .call(class, function, args)
            .map_err(|e| e.to_string())
    }

    /// `devices["name"].Class.fn(...)` for another device.
    fn call_named(
        &self,
        link: &Link,
        target: &str,
        class: &str,
        function: &str,
        args: &[Value],
    ) -> Result<Value, String> {
        let qualified = format!("{class}.{function}");
        let found = link.with_peers(|peers| {
            let names: Vec<String> = peers
                .all()
                .map(|p| {
                    let state = if p.online { "online" } else { "offline" };
                    format!("`{}` ({state})", normalise(&p.name))
                })
                .collect();
            match peers.resolve(target) {
                None => Err(format!(
                    "no device named `{target}`; known devices: `{}` (this one){}{}",
                    normalise(&self.name),
                    if names.is_empty() { "" } else { ", " },
                    names.join(", ")
                )),
                Some(p) if !p.online => Err(format!(
                    "device `{}` is offline; {qualified} cannot run there now",
                    normalise(&p.name)
                )),
                Some(p) => match p.function(class, function) {
                    None => Err(format!(
                        "device `{}` has no skill {qualified}; use device.search_skills(\"...\") to see what it offers",
                        normalise(&p.name)
                    )),
                    Some(f) => Ok((p.id.clone(), p.name.clone(), f.clone())),
                },
            }
        })?;
        let (id, name, f) = found;
        self.call_remote(link, (&id, &name), &f, args)
    }

    /// Calls `f` on the device `(id, name)`. A `@confirm` function is confirmed here,
    /// by the person this conversation is with, and the yes travels with the call:
    /// the host has nobody to ask.
    fn call_remote(
        &self,
        link: &Link,
        (id, name): (&str, &str),
        f: &SkillFunction,
        args: &[Value],
    ) -> Result<Value, String> {
        crate::skills::bind(f, args).map_err(|e| e.to_string())?;
        let confirmed = self
            .policy
            .admit_outgoing(f, args, name)
            .map_err(|e| e.to_string())?;
        link.call_blocking_as(id, name, &f.class, &f.name, args, confirmed)
    }

    /// A call this device cannot serve itself: to the one online device that can.
    /// `None` when no other device knows the function either (the local error applies).
    fn call_anywhere(
        &self,
        link: &Link,
        class: &str,
        function: &str,
        args: &[Value],
    ) -> Option<Result<Value, String>> {
        let qualified = format!("{class}.{function}");
        let (online, offline): (Vec<(String, String, SkillFunction)>, Vec<String>) = link
            .with_peers(|peers| {
                let mut online = Vec::new();
                let mut offline = Vec::new();
                for p in peers.all() {
                    if let Some(f) = p.function(class, function) {
                        if p.online {
                            online.push((p.id.clone(), p.name.clone(), f.clone()));
                        } else {
                            offline.push(normalise(&p.name));
                        }
                    }
                }
                (online, offline)
            });
        match online.as_slice() {
            [] if offline.is_empty() => None,
            [] => Some(Err(format!(
                "{qualified} is only on {}, which {} offline",
                offline
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if offline.len() == 1 { "is" } else { "are" }
            ))),
            [(id, name, f)] => Some(self.call_remote(link, (id, name), f, args)),
            many => {
                let names: Vec<String> = many.iter().map(|(_, n, _)| normalise(n)).collect();
                Some(Err(format!(
                    "{qualified} is on several devices: {}; pick one, e.g. devices[\"{}\"].{qualified}(...)",
                    names
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    names[0]
                )))
            }
        }
    }
}

/// One distinct skill function in a search across devices.
struct Entry<'a> {
    function: &'a SkillFunction,
    signature: String,
    local: bool,
    devices: Vec<&'a str>,
    online: Vec<&'a str>,
}

/// The distinct functions of a search across devices and their documents, in step.
#[derive(Default)]
struct Found<'a> {
    entries: Vec<Entry<'a>>,
    docs: Vec<Doc<'a>>,
    by_key: HashMap<(&'a str, &'a str, String), usize>,
}

impl<'a> Found<'a> {
    /// Adds `f` as hosted by `device` (`online` or not); a function already seen
    /// (same class, name and signature) only gains the device, and keeps the text it
    /// was first seen with.
    fn add(
        &mut self,
        doc: Doc<'a>,
        f: &'a SkillFunction,
        device: &'a str,
        local: bool,
        online: bool,
    ) {
        let signature = f.signature();
        match self
            .by_key
            .entry((f.class.as_str(), f.name.as_str(), signature.clone()))
        {
            std::collections::hash_map::Entry::Occupied(seen) => {
                let entry = &mut self.entries[*seen.get()];
                // Devices come one after the other: one already listed is the last.
                if entry.devices.last() != Some(&device) {
                    entry.devices.push(device);
                    if online {
                        entry.online.push(device);
                    }
                }
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(self.entries.len());
                self.entries.push(Entry {
                    function: f,
                    signature,
                    local,
                    devices: vec![device],
                    online: if online { vec![device] } else { Vec::new() },
                });
                self.docs.push(doc);
            }
        }
    }
}

/// Where skills are: this device, and every other device that registered some
/// (by name), to tell model code which devices have a class or function and which of
/// them are online.
struct Places<'a> {
    own: &'a str,
    registry: &'a Registry,
    peers: Vec<&'a Peer>,
}

impl<'a> Places<'a> {
    fn new(own: &'a str, registry: &'a Registry, peers: Option<&'a Peers>) -> Self {
        let mut peers: Vec<&Peer> = peers
            .into_iter()
            .flat_map(Peers::all)
            .filter(|p| p.registered)
            .collect();
        peers.sort_by(|a, b| a.name.cmp(&b.name));
        Places {
            own,
            registry,
            peers,
        }
    }

    /// The first answer `find` gives for another device, online devices first.
    fn remote<R>(&self, find: impl Fn(&'a Peer) -> Option<R>) -> Option<R> {
        let (online, offline): (Vec<&Peer>, Vec<&Peer>) = self.peers.iter().partition(|p| p.online);
        online.into_iter().chain(offline).find_map(find)
    }

    /// The names of the devices that have class `class` (or its function `f`, with
    /// the same signature), this one first, and of those of them that are online.
    fn locate(&self, class: &str, f: Option<&SkillFunction>) -> (Vec<&'a str>, Vec<&'a str>) {
        let signature = f.map(SkillFunction::signature);
        let matches = |found: Option<&SkillFunction>| match (found, &signature) {
            (Some(found), Some(signature)) => found.signature() == *signature,
            (found, None) => found.is_some(),
            (None, Some(_)) => false,
        };
        let mut devices = Vec::new();
        let mut online = Vec::new();
        let here = self.registry.class(class).and_then(|c| {
            c.functions
                .iter()
                .filter(|g| g.model_callable)
                .find(|g| f.is_none_or(|f| g.name == f.name))
        });
        if matches(here) {
            devices.push(self.own);
            online.push(self.own);
        }
        for peer in &self.peers {
            let there = peer.classes.iter().find(|c| c.name == class).and_then(|c| {
                c.functions
                    .iter()
                    .find(|g| f.is_none_or(|f| g.name == f.name))
            });
            if matches(there) {
                devices.push(peer.name.as_str());
                if peer.online {
                    online.push(peer.name.as_str());
                }
            }
        }
        (devices, online)
    }

    /// What `device.get_skill_info` returns for one class: scripts see only the
    /// functions they may call.
    fn class_info<'f>(
        &self,
        name: &str,
        summary: &str,
        description: &str,
        functions: impl Iterator<Item = &'f SkillFunction>,
    ) -> Value {
        let (devices, online) = self.locate(name, None);
        json!({
            "class": name,
            "summary": summary,
            "description": description,
            "devices": devices,
            "online": online,
            "functions": functions.map(|f| self.function_info(f)).collect::<Vec<_>>(),
        })
    }

    /// What `device.get_function_info` returns for one function.
    fn function_info(&self, f: &SkillFunction) -> Value {
        let (devices, online) = self.locate(&f.class, Some(f));
        json!({
            "name": f.qualified_name(),
            "signature": f.signature(),
            "summary": f.summary,
            "docstring": f.docstring,
            "needs_confirmation": f.confirm,
            "devices": devices,
            "online": online,
        })
    }
}

impl DeviceHandler for Device {
    fn handle(&self, request: DeviceRequest) -> Result<Value, String> {
        match request {
            DeviceRequest::SearchSkills { query } => Ok(self.search(&query)),
            DeviceRequest::GetSkillInfo { class } => self.skill_info(&class),
            DeviceRequest::GetFunctionInfo { name } => self.function_info(&name),
            DeviceRequest::Call {
                device,
                class,
                function,
                args,
            } => self.call(device.as_deref(), &class, &function, &args),
        }
    }
}

fn unknown_class(registry: &Registry, class: &str) -> String {
    let known: Vec<&str> = registry.classes().iter().map(|c| c.name.as_str()).collect();
    if known.is_empty() {
        format!("no skill class `{class}`: this device has no skills loaded")
    } else {
        format!(
            "no skill class `{class}`; classes here: {}. Use device.search_skills(\"...\") to find a function",
            known.join(", ")
        )
    }
}
