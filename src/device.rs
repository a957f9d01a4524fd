//! The `device` object model-written code sees (DESIGN.md 2.1), wired to the skills.
//!
//! The sandbox only ferries [`DeviceRequest`]s across; this is where they get their
//! meaning and where policy lives: a function marked `@no_model` is refused, and one
//! marked `@confirm` runs only after a person said yes. Every error is a sentence the
//! model can act on, because it reads them and tries again.
//!
//! With an MQTT [`Link`], skills of other spokes join the local ones (DESIGN.md 2.1):
//! search lists each distinct skill once with the devices that host it (this device
//! first), and a call goes to this device when it hosts the skill, else to the one
//! online device that does, else fails naming the candidates. Without a link every
//! answer is exactly the local-only one.

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::mqtt::Link;
use crate::mqtt::peers::{Peer, Peers, RemoteClass};
use crate::sandbox::{DeviceHandler, DeviceRequest};
use crate::skills::search::Doc;
use crate::skills::watch::LiveRegistry;
use crate::skills::{Registry, SkillClass, SkillFunction};

/// How many results `device.search_skills` returns at most.
const SEARCH_LIMIT: usize = 20;

/// Asks a person whether a skill call marked `@confirm` may run.
pub trait Confirm: Send + Sync {
    /// Returns true when the person agreed to `call`, a readable rendering of the call.
    fn confirm(&self, call: &str) -> bool;
}

/// Asks on the terminal; says no when there is no terminal to ask on.
pub struct ConsoleConfirm;

impl Confirm for ConsoleConfirm {
    fn confirm(&self, call: &str) -> bool {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return false;
        }
        let mut stderr = std::io::stderr();
        // The prompt goes to stderr so it never mixes with the script's output.
        if write!(stderr, "Allow {call}? [y/N] ")
            .and_then(|()| stderr.flush())
            .is_err()
        {
            return false;
        }
        let mut answer = String::new();
        if stdin.lock().read_line(&mut answer).is_err() {
            return false;
        }
        matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
    }
}

/// Says no to everything: for runs with nobody to ask.
pub struct NeverConfirm;

impl Confirm for NeverConfirm {
    fn confirm(&self, _call: &str) -> bool {
        false
    }
}

/// The `device` API of this spoke.
pub struct Device {
    name: String,
    registry: Arc<LiveRegistry>,
    confirm: Arc<dyn Confirm>,
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
        Device {
            name: name.into(),
            registry,
            confirm,
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
                })
            })
            .collect();
        Value::Array(hits)
    }

    /// Search over this device's and every online peer's skills: one entry per class,
    /// function and signature, listing its devices, this one first. Reads the indexes
    /// built when the skills loaded or arrived and a snapshot of the peers: the work
    /// is linear in the functions, and the connection is never held up.
    fn search_everywhere(&self, registry: &Registry, peers: &Peers, query: &str) -> Value {
        let mut found = Found::default();
        for (ci, class) in registry.classes().iter().enumerate() {
            for (fi, f) in class.functions.iter().enumerate() {
                if f.model_callable {
                    found.add(registry.index().doc(ci, fi), f, &self.name, true);
                }
            }
        }
        let mut online: Vec<&Peer> = peers.all().filter(|p| p.online).collect();
        online.sort_by(|a, b| a.name.cmp(&b.name));
        for peer in online {
            for (ci, class) in peer.classes.iter().enumerate() {
                for (fi, f) in class.functions.iter().enumerate() {
                    found.add(peer.index.doc(ci, fi), f, &peer.name, false);
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
        // Best first; among equals, skills this device hosts first, then by name.
        ranked.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then(b.1.local.cmp(&a.1.local))
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
                    })
                })
                .collect(),
        )
    }

    fn skill_info(&self, class: &str) -> Result<Value, String> {
        let registry = self.registry.current();
        if let Some(skill) = registry.class(class) {
            return Ok(class_info(skill));
        }
        if let Some(info) = self.remote_find(|peer| {
            peer.classes
                .iter()
                .find(|c| c.name == class)
                .map(|c| remote_class_info(c, &peer.name))
        }) {
            return Ok(info);
        }
        Err(unknown_class(&registry, class))
    }

    /// The first answer `f` gives for an online peer.
    fn remote_find<R>(&self, f: impl Fn(&Peer) -> Option<R>) -> Option<R> {
        let link = self.link.as_ref()?;
        link.with_peers(|peers| peers.all().filter(|p| p.online).find_map(f))
    }

    fn function_info(&self, name: &str) -> Result<Value, String> {
        let registry = self.registry.current();
        let f = match registry.function(name) {
            Ok(f) => f,
            Err(error) => {
                let remote = name.split_once('.').and_then(|(class, function)| {
                    self.remote_find(|peer| peer.function(class, function).map(function_info))
                });
                return remote.ok_or_else(|| error.to_string());
            }
        };
        if !f.model_callable {
            return Err(format!(
                "{} is not available to scripts",
                f.qualified_name()
            ));
        }
        Ok(function_info(f))
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
        if !f.model_callable {
            return Err(format!(
                "{qualified} cannot be called from scripts; a person can run it with `strawberry-spoke skills call {qualified}`"
            ));
        }
        if f.confirm {
            let rendered = format!("{qualified}({})", render_args(args));
            if !self.confirm.confirm(&rendered) {
                return Err(format!("the user did not allow {rendered}"));
            }
        }
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
        crate::skills::bind(&f, args).map_err(|e| e.to_string())?;
        link.call_blocking(&id, &name, class, function, args)
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
            [(id, name, f)] => Some(
                crate::skills::bind(f, args)
                    .map_err(|e| e.to_string())
                    .and_then(|_| link.call_blocking(id, name, class, function, args)),
            ),
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
}

/// The distinct functions of a search across devices and their documents, in step.
#[derive(Default)]
struct Found<'a> {
    entries: Vec<Entry<'a>>,
    docs: Vec<Doc<'a>>,
    by_key: HashMap<(&'a str, &'a str, String), usize>,
}

impl<'a> Found<'a> {
    /// Adds `f` as hosted by `device`; a function already seen (same class, name and
    /// signature) only gains the device, and keeps the text it was first seen with.
    fn add(&mut self, doc: Doc<'a>, f: &'a SkillFunction, device: &'a str, local: bool) {
        let signature = f.signature();
        match self
            .by_key
            .entry((f.class.as_str(), f.name.as_str(), signature.clone()))
        {
            std::collections::hash_map::Entry::Occupied(seen) => {
                let devices = &mut self.entries[*seen.get()].devices;
                // Devices come one after the other: one already listed is the last.
                if devices.last() != Some(&device) {
                    devices.push(device);
                }
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(self.entries.len());
                self.entries.push(Entry {
                    function: f,
                    signature,
                    local,
                    devices: vec![device],
                });
                self.docs.push(doc);
            }
        }
    }
}

/// `device.get_skill_info` for a class another device hosts.
fn remote_class_info(class: &RemoteClass, device: &str) -> Value {
    json!({
        "class": class.name,
        "summary": class.summary,
        "description": class.description,
        "device": device,
        "functions": class.functions.iter().map(function_info).collect::<Vec<_>>(),
    })
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

/// A device name as `devices["..."]` and MQTT topics write it: lowercase ASCII
/// letters and digits, everything else folded into single `-`.
pub fn normalise(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// What `device.get_skill_info` returns for one class: scripts see only the functions
/// they may call.
pub fn class_info(skill: &SkillClass) -> Value {
    json!({
        "class": skill.name,
        "summary": skill.summary,
        "description": skill.description,
        "functions": skill
            .functions
            .iter()
            .filter(|f| f.model_callable)
            .map(function_info)
            .collect::<Vec<_>>(),
    })
}

/// What `device.get_function_info` returns for one function.
pub fn function_info(f: &SkillFunction) -> Value {
    json!({
        "name": f.qualified_name(),
        "signature": f.signature(),
        "summary": f.summary,
        "docstring": f.docstring,
        "needs_confirmation": f.confirm,
    })
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

fn render_args(args: &[Value]) -> String {
    args.iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::normalise;

    #[test]
    fn device_names_normalise() {
        assert_eq!(normalise("Kitchen"), "kitchen");
        assert_eq!(normalise("Living Room TV"), "living-room-tv");
        assert_eq!(normalise("  ünïcode -- box! "), "n-code-box");
    }
}
