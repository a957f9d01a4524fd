//! The MQTT protocol between spokes (and the hub): topics and payloads.
//!
//! This is a public interface (the hub and other tools read it), documented in
//! docs/mqtt.md; every registration carries [`SCHEMA_VERSION`] so readers can tell what they
//! are looking at. Payloads are JSON. Parsing is strict about types and lenient about
//! extra fields, so a newer spoke can add fields without breaking older readers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::skills::{MAX_REQUEST_CHARS, MAX_REQUESTS, Param, Registry, SkillFunction, ValueType};

/// Version of the registration and call payloads described here.
pub const SCHEMA_VERSION: u32 = 1;

/// The retained status payload of a connected spoke.
pub const ONLINE: &str = "online";
/// The retained status payload (and last will) of a spoke that is gone.
pub const OFFLINE: &str = "offline";

/// Whether `id` is usable as a device id in topics: `a-z`, `0-9` and `-`, at most 64.
/// Messages under any other id are not from a spoke and are ignored.
pub fn valid_device_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Whether `name` is a class, function or parameter name: a Rhai identifier. Anything
/// else in a registration could not be called and could hide text in a name.
pub fn valid_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The topics of one installation (`prefix`, default `strawberry`).
#[derive(Debug, Clone)]
pub struct Topics {
    prefix: String,
}

/// What an incoming topic is about.
#[derive(Debug, PartialEq, Eq)]
pub enum TopicKind<'a> {
    /// `{p}/devices/{id}/status`.
    Status(&'a str),
    /// `{p}/devices/{id}/skills`.
    Skills(&'a str),
    /// `{p}/devices/{id}/rpc`.
    Rpc(&'a str),
    /// `{p}/devices/{id}/replies`.
    Replies(&'a str),
    /// `{p}/devices/{id}/wake`.
    Wake(&'a str),
}

impl Topics {
    /// Topics below `prefix`.
    pub fn new(prefix: &str) -> Topics {
        Topics {
            prefix: prefix.trim_end_matches('/').to_string(),
        }
    }

    /// The prefix, without a trailing `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `{p}/devices/{id}/status`: retained `online` / `offline`.
    pub fn status(&self, id: &str) -> String {
        format!("{}/devices/{id}/status", self.prefix)
    }

    /// `{p}/devices/{id}/skills`: the retained [`Registration`].
    pub fn skills(&self, id: &str) -> String {
        format!("{}/devices/{id}/skills", self.prefix)
    }

    /// `{p}/devices/{id}/rpc`: [`CallRequest`]s for that device.
    pub fn rpc(&self, id: &str) -> String {
        format!("{}/devices/{id}/rpc", self.prefix)
    }

    /// `{p}/devices/{id}/replies`: where that device wants its [`CallResponse`]s.
    pub fn replies(&self, id: &str) -> String {
        format!("{}/devices/{id}/replies", self.prefix)
    }

    /// `{p}/devices/{id}/wake`: that device's [`WakeClaim`]s.
    pub fn wake(&self, id: &str) -> String {
        format!("{}/devices/{id}/wake", self.prefix)
    }

    /// Every device's wake claims (a subscription filter).
    pub fn all_wake(&self) -> String {
        format!("{}/devices/+/wake", self.prefix)
    }

    /// Every device's status (a subscription filter).
    pub fn all_status(&self) -> String {
        format!("{}/devices/+/status", self.prefix)
    }

    /// Every device's registration (a subscription filter).
    pub fn all_skills(&self) -> String {
        format!("{}/devices/+/skills", self.prefix)
    }

    /// Classifies an incoming topic; `None` for anything else.
    pub fn parse<'a>(&self, topic: &'a str) -> Option<TopicKind<'a>> {
        let rest = topic
            .strip_prefix(&self.prefix)?
            .strip_prefix("/devices/")?;
        let (id, leaf) = rest.split_once('/')?;
        if id.is_empty() || id.contains('/') {
            return None;
        }
        Some(match leaf {
            "status" => TopicKind::Status(id),
            "skills" => TopicKind::Skills(id),
            "rpc" => TopicKind::Rpc(id),
            "replies" => TopicKind::Replies(id),
            "wake" => TopicKind::Wake(id),
            _ => return None,
        })
    }

    /// Whether a call may ask for its answer on `topic`: below the prefix, no
    /// wildcards, not a status or registration topic. A hostile request must not turn
    /// this spoke into a way to publish anywhere else.
    pub fn valid_response_topic(&self, topic: &str) -> bool {
        topic.len() <= 512
            && topic.starts_with(&format!("{}/", self.prefix))
            && !topic.contains(['+', '#', '\0'])
            && !matches!(
                self.parse(topic),
                Some(
                    TopicKind::Status(_)
                        | TopicKind::Skills(_)
                        | TopicKind::Rpc(_)
                        | TopicKind::Wake(_)
                )
            )
    }
}

/// Largest wake claim read; a claim is a few dozen bytes.
pub const MAX_WAKE_CLAIM_BYTES: usize = 1024;

/// "I heard the wake word, this well": published (not retained) on
/// `{p}/devices/{id}/wake` the moment a spoke detects it, so spokes that heard the same
/// utterance can agree on one to answer (see `daemon::voice`). When it was heard is
/// when it arrives: spokes compare receive times on their own clocks, never each
/// other's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeClaim {
    /// [`SCHEMA_VERSION`] of the publisher.
    pub schema: u32,
    /// How far the wake phrase was above the spoke's own noise floor, in dB: the
    /// nearest spoke hears it loudest over its room. Decides.
    pub proximity_db: f32,
    /// The wake word detector's score (0-1). Breaks ties.
    pub score: f32,
}

impl WakeClaim {
    /// Reads a claim; `None` for anything too large or malformed.
    pub fn parse(payload: &[u8]) -> Option<WakeClaim> {
        if payload.len() > MAX_WAKE_CLAIM_BYTES {
            return None;
        }
        let claim: WakeClaim = serde_json::from_slice(payload).ok()?;
        (claim.proximity_db.is_finite() && claim.score.is_finite()).then_some(claim)
    }
}

/// The retained registration a spoke publishes on `{p}/devices/{id}/skills`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registration {
    /// [`SCHEMA_VERSION`] of the publisher.
    pub schema: u32,
    /// The stable device id (the topic level).
    pub device_id: String,
    /// The display name; `devices["..."]` matches its normalised form.
    pub name: String,
    /// Skill classes with the functions other devices may call.
    pub classes: Vec<ClassEntry>,
}

/// One skill class in a [`Registration`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassEntry {
    /// E.g. `VolumeSkill`.
    pub name: String,
    /// The class summary.
    pub summary: String,
    /// The rest of the class prose.
    #[serde(default)]
    pub description: String,
    /// Example requests and the code that serves them.
    #[serde(default)]
    pub examples: Vec<ExampleEntry>,
    /// The callable functions.
    pub functions: Vec<FunctionEntry>,
}

/// An example request of a class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExampleEntry {
    /// What a user might say.
    pub request: String,
    /// The code that serves it.
    pub code: String,
}

/// One function in a [`Registration`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionEntry {
    /// E.g. `set`.
    pub name: String,
    /// The typed signature, e.g. `set(level: int) -> int`.
    pub signature: String,
    /// One-line summary.
    pub summary: String,
    /// The rest of the prose.
    #[serde(default)]
    pub docstring: String,
    /// The parameters, in order.
    #[serde(default)]
    pub params: Vec<ParamEntry>,
    /// The return type (`int`, `()`, ...).
    pub returns: String,
    /// Whether the hosting device asks its user before running it.
    #[serde(default)]
    pub confirm: bool,
    /// Ways people ask for it (`@request` lines), for search; absent when none, so
    /// registrations without them read as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<String>,
}

/// One parameter of a [`FunctionEntry`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamEntry {
    /// Its name.
    pub name: String,
    /// Its type: `int`, `float`, `bool`, `string`, `array`, `map` or `any`.
    #[serde(rename = "type")]
    pub ty: String,
    /// The default when omitted; absent when required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// What it means.
    #[serde(default)]
    pub description: String,
}

impl Registration {
    /// The registration of `registry`'s functions that `exported` lets other devices call.
    pub fn of(
        registry: &Registry,
        device_id: &str,
        name: &str,
        exported: impl Fn(&SkillFunction) -> bool,
    ) -> Registration {
        let classes = registry
            .classes()
            .iter()
            .filter_map(|class| {
                let functions: Vec<FunctionEntry> = class
                    .functions
                    .iter()
                    .filter(|f| exported(f))
                    .map(FunctionEntry::of)
                    .collect();
                (!functions.is_empty()).then(|| ClassEntry {
                    name: class.name.clone(),
                    summary: class.summary.clone(),
                    description: class.description.clone(),
                    examples: class
                        .examples
                        .iter()
                        .map(|e| ExampleEntry {
                            request: e.request.clone(),
                            code: e.code.clone(),
                        })
                        .collect(),
                    functions,
                })
            })
            .collect();
        Registration {
            schema: SCHEMA_VERSION,
            device_id: device_id.to_string(),
            name: name.to_string(),
            classes,
        }
    }
}

impl FunctionEntry {
    fn of(f: &SkillFunction) -> FunctionEntry {
        FunctionEntry {
            name: f.name.clone(),
            signature: f.signature(),
            summary: f.summary.clone(),
            docstring: f.docstring.clone(),
            params: f
                .params
                .iter()
                .map(|p| ParamEntry {
                    name: p.name.clone(),
                    ty: p.ty.to_string(),
                    default: p.default.clone(),
                    description: p.description.clone(),
                })
                .collect(),
            returns: f.returns.to_string(),
            confirm: f.confirm,
            requests: f.requests.clone(),
        }
    }

    /// The function as this spoke describes skills, for search and argument checks;
    /// `None` when a type name is unknown (a newer or broken publisher).
    pub fn to_function(&self, class: &str) -> Option<SkillFunction> {
        let params = self
            .params
            .iter()
            .map(|p| {
                Some(Param {
                    name: p.name.clone(),
                    ty: ValueType::parse(&p.ty).filter(|t| *t != ValueType::Unit)?,
                    default: p.default.clone(),
                    description: p.description.clone(),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(SkillFunction {
            class: class.to_string(),
            name: self.name.clone(),
            params,
            returns: ValueType::parse(&self.returns)?,
            returns_doc: String::new(),
            summary: self.summary.clone(),
            docstring: self.docstring.clone(),
            // A peer's requests cost an embedding each here: bounded as a file's are.
            requests: self
                .requests
                .iter()
                .filter(|r| r.chars().count() <= MAX_REQUEST_CHARS)
                .take(MAX_REQUESTS)
                .cloned()
                .collect(),
            confirm: self.confirm,
            model_callable: true,
            // A peer registers only what it lets other devices call.
            remote: true,
            file: Default::default(),
            line: 0,
        })
    }
}

/// A call, published on `{p}/devices/{id}/rpc` with MQTT v5 response topic and
/// correlation data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallRequest {
    /// [`SCHEMA_VERSION`] of the caller; absent means 1.
    #[serde(default = "schema_one")]
    pub schema: u32,
    /// The class, e.g. `VolumeSkill`.
    pub class: String,
    /// The function, e.g. `set`.
    pub function: String,
    /// Positional arguments, or one object of named ones.
    #[serde(default)]
    pub args: Vec<Value>,
    /// Display name of the calling device, for logs and confirmation prompts.
    #[serde(default)]
    pub from: String,
    /// The caller asked its own user about this `@confirm` function and they said
    /// yes. Sent only when true, so calls that need no confirmation stay readable by
    /// devices that predate the field.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub confirmed: bool,
}

fn schema_one() -> u32 {
    1
}

/// The answer to a [`CallRequest`], always sent, on the request's response topic with
/// its correlation data: `{"ok": true, "result": ...}` or `{"ok": false, "error": "..."}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallResponse {
    /// Whether the call returned a value.
    pub ok: bool,
    /// The value, when `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// What went wrong, when not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CallResponse {
    /// The answer for `outcome`.
    pub fn from_result(outcome: Result<Value, String>) -> CallResponse {
        match outcome {
            Ok(value) => CallResponse {
                ok: true,
                result: Some(value),
                error: None,
            },
            Err(error) => CallResponse {
                ok: false,
                result: None,
                error: Some(error),
            },
        }
    }

    /// Back to a result; an `ok: false` without a message still says what happened.
    pub fn into_result(self) -> Result<Value, String> {
        if self.ok {
            Ok(self.result.unwrap_or(Value::Null))
        } else {
            Err(self
                .error
                .unwrap_or_else(|| "the remote device reported an error without a message".into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_round_trip() {
        let t = Topics::new("home/");
        assert_eq!(t.status("ab"), "home/devices/ab/status");
        assert_eq!(t.parse("home/devices/ab/rpc"), Some(TopicKind::Rpc("ab")));
        assert_eq!(
            t.parse("home/devices/ab/replies"),
            Some(TopicKind::Replies("ab"))
        );
        assert_eq!(t.parse("home/devices/ab/other"), None);
        assert_eq!(t.parse("other/devices/ab/rpc"), None);
    }

    #[test]
    fn response_topics_are_confined() {
        let t = Topics::new("strawberry");
        assert!(t.valid_response_topic("strawberry/devices/x/replies"));
        assert!(t.valid_response_topic("strawberry/hub/replies/7"));
        assert!(!t.valid_response_topic("strawberry/devices/x/status"));
        assert!(!t.valid_response_topic("strawberry/devices/x/skills"));
        assert!(!t.valid_response_topic("strawberry/#"));
        assert!(!t.valid_response_topic("elsewhere/topic"));
    }

    #[test]
    fn names_and_ids_are_checked() {
        assert!(
            valid_identifier("Volume_2") && !valid_identifier("2x") && !valid_identifier("a.b")
        );
        assert!(valid_device_id("tv-1") && !valid_device_id("TV") && !valid_device_id(""));
    }

    #[test]
    fn confirmed_is_sent_only_when_true_and_absent_means_false() {
        let mut call = CallRequest {
            schema: 1,
            class: "NotesSkill".into(),
            function: "clear".into(),
            args: vec![],
            from: "Kitchen".into(),
            confirmed: false,
        };
        let plain = serde_json::to_string(&call).unwrap();
        assert!(!plain.contains("confirmed"), "{plain}");
        call.confirmed = true;
        let confirmed = serde_json::to_value(&call).unwrap();
        assert_eq!(confirmed["confirmed"], Value::Bool(true));
        let back: CallRequest = serde_json::from_str(&plain).unwrap();
        assert!(!back.confirmed);
    }

    #[test]
    fn requests_travel_only_when_present_and_a_peer_s_are_bounded() {
        let entry = |requests: Vec<String>| FunctionEntry {
            name: "power_on".into(),
            signature: "power_on() -> ()".into(),
            summary: "Switch the TV on.".into(),
            docstring: String::new(),
            params: Vec::new(),
            returns: "()".into(),
            confirm: false,
            requests,
        };
        // Registrations without requests read as before the field existed.
        let plain = serde_json::to_value(entry(Vec::new())).unwrap();
        assert!(plain.get("requests").is_none(), "{plain}");
        let old: FunctionEntry = serde_json::from_value(plain).unwrap();
        assert!(old.requests.is_empty());
        // A peer's requests: too long ones dropped, at most MAX_REQUESTS kept.
        let mut requests = vec!["x".repeat(MAX_REQUEST_CHARS + 1)];
        requests.extend((0..MAX_REQUESTS + 5).map(|n| format!("put channel {n} on")));
        let function = entry(requests).to_function("TvSkill").unwrap();
        assert_eq!(function.requests.len(), MAX_REQUESTS);
        assert_eq!(function.requests[0], "put channel 0 on");
        let round = serde_json::to_string(&entry(vec!["put the telly on".into()])).unwrap();
        let read: FunctionEntry = serde_json::from_str(&round).unwrap();
        assert_eq!(
            read.to_function("TvSkill").unwrap().requests,
            ["put the telly on"]
        );
    }

    #[test]
    fn responses_always_carry_a_message() {
        let r: CallResponse = serde_json::from_str(r#"{"ok": false}"#).unwrap();
        assert!(r.into_result().unwrap_err().contains("without a message"));
        let r = CallResponse::from_result(Ok(Value::from(3)));
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"ok":true,"result":3}"#
        );
    }

    #[test]
    fn wake_claims_are_read_within_their_bounds() {
        let claim = WakeClaim::parse(br#"{"schema":1,"proximity_db":31.5,"score":0.6}"#);
        assert_eq!(
            claim,
            Some(WakeClaim {
                schema: 1,
                proximity_db: 31.5,
                score: 0.6
            })
        );
        // A later schema's extra fields are ignored; missing ones are not guessed.
        assert!(
            WakeClaim::parse(br#"{"schema":2,"proximity_db":1,"score":0.5,"x":[1]}"#).is_some()
        );
        assert!(WakeClaim::parse(br#"{"schema":1,"score":0.5}"#).is_none());
        assert!(WakeClaim::parse(br#"{"schema":1,"proximity_db":1e999,"score":0.5}"#).is_none());
        let mut big = br#"{"schema":1,"proximity_db":1,"score":0.5,"pad":""#.to_vec();
        big.extend(std::iter::repeat_n(b'x', MAX_WAKE_CLAIM_BYTES));
        big.extend(br#""}"#);
        assert!(WakeClaim::parse(&big).is_none());
        assert!(Topics::new("p").parse("p/devices/tv/wake") == Some(TopicKind::Wake("tv")));
        assert!(!Topics::new("p").valid_response_topic("p/devices/tv/wake"));
    }
}
