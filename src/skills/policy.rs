//! Who may run a skill function, and what must happen first: the one place that
//! decides, for code the model wrote on this device, for a call this device sends to
//! another, and for a call another device sends here.
//!
//! The rules used to be written twice, once in the sandbox's `device` and once in the
//! MQTT server, and drifted (one cleaned the text it showed a person, the other did
//! not). Here they read as one table:
//!
//! | caller                   | `@no_model` | not opened to peers | `@confirm`                         |
//! |--------------------------|-------------|---------------------|------------------------------------|
//! | model code, this device  | refused     | runs                | asks the person here               |
//! | model code, to a peer    | refused     | (the peer decides)  | asks the person here; sends the yes |
//! | a peer's call            | refused     | refused             | runs if the peer's user said yes, else asks here |
//!
//! "Opened to peers" is the function's `@remote` mark or `mqtt.remote_allow` naming it
//! ([`AllowList`]). Every call and question shown to a person passes through
//! [`clean_line`]: arguments come from the model or the network.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;

use serde_json::Value;

use super::SkillFunction;
use crate::text::clean_line;

/// Longest caller name shown in a confirmation prompt or log line, in characters.
const MAX_FROM: usize = 64;

/// A call to a `@confirm` function waiting for a person's yes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asking {
    /// The call, readable: `NotesSkill.clear("shopping")`, with ` on Kitchen` when
    /// another device hosts it, or ` from Hall` when another device asks for it.
    pub call: String,
    /// The same as a question to say aloud: "Shall I clear a list, with name shopping?"
    pub question: String,
}

/// Asks a person whether a skill call marked `@confirm` may run.
pub trait Confirm: Send + Sync {
    /// Returns true when the person agreed to the call.
    fn confirm(&self, asking: &Asking) -> bool;
}

/// Asks on the terminal; says no when there is no terminal to ask on.
pub struct ConsoleConfirm;

impl Confirm for ConsoleConfirm {
    fn confirm(&self, asking: &Asking) -> bool {
        let call = &asking.call;
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            tracing::warn!(call = %call, "no terminal to ask on: taken as a no");
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
    fn confirm(&self, _asking: &Asking) -> bool {
        false
    }
}

/// The skills other devices may call: those their skill file marks `@remote`, plus those
/// `mqtt.remote_allow` names.
///
/// Why opt-in: any client of the broker can call what is open, so a function that stores
/// or reveals something (notes, a command) must not be open just because it exists.
#[derive(Debug, Clone, Default)]
pub struct AllowList(Vec<String>);

impl AllowList {
    /// From the configured entries.
    pub fn new(entries: Vec<String>) -> AllowList {
        AllowList(entries)
    }

    /// Whether other devices may call `f`: never a `@no_model` function; a `@remote` one
    /// always; otherwise when `mqtt.remote_allow` names it, its class, or `*` (which
    /// leaves out `@confirm` functions).
    pub fn permits(&self, f: &SkillFunction) -> bool {
        f.model_callable
            && (f.remote
                || self
                    .0
                    .iter()
                    .any(|e| (e == "*" && !f.confirm) || *e == f.class || *e == f.qualified_name()))
    }
}

/// Who wants a skill function run on this device.
#[derive(Debug, Clone, Copy)]
pub enum Caller<'a> {
    /// Code the model wrote for the person at this device.
    Model,
    /// Another device over the broker: `from` is the name it gave (unchecked text),
    /// `confirmed` whether its own user already said yes to this call.
    Peer { from: &'a str, confirmed: bool },
}

/// Why a call was refused. Each is a sentence the model (or the calling device) can act
/// on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    /// A `@no_model` function asked for by model code.
    #[error(
        "{qualified} cannot be called from scripts; a person can run it with `strawberry-spoke skills call {qualified}`"
    )]
    NotForModel { qualified: String },
    /// A `@no_model` function asked for by another device.
    #[error("{qualified} can never be called from another device")]
    NeverRemote { qualified: String },
    /// A function this device has not opened to others.
    #[error(
        "{qualified} is not open to other devices; mark it `@remote` in its skill file or add it to mqtt.remote_allow on `{device}`"
    )]
    NotOpen { qualified: String, device: String },
    /// The person here said no.
    #[error("the user said no to {call}")]
    SaidNo { call: String },
    /// Another device's call that its own user did not confirm, and nobody here agreed.
    #[error(
        "the user of `{device}` did not allow {call} (the calling device did not confirm it with its own user: \"confirmed\": true)"
    )]
    NotConfirmed { device: String, call: String },
}

/// The rules of one device: its name, what it opened to others, and who to ask.
pub struct Policy {
    device: String,
    allow: AllowList,
    confirm: Arc<dyn Confirm>,
}

impl Policy {
    /// The policy of the device `device`, asking `confirm` before `@confirm` functions
    /// run and letting other devices call what `allow` permits.
    pub fn new(device: impl Into<String>, allow: AllowList, confirm: Arc<dyn Confirm>) -> Policy {
        Policy {
            device: device.into(),
            allow,
            confirm,
        }
    }

    /// Whether `f(args)` may run here for `caller`, asking the person here when the
    /// function needs a yes that the caller did not bring.
    pub fn admit(
        &self,
        f: &SkillFunction,
        args: &[Value],
        caller: Caller<'_>,
    ) -> Result<(), Refusal> {
        let qualified = || f.qualified_name();
        match caller {
            Caller::Model if !f.model_callable => Err(Refusal::NotForModel {
                qualified: qualified(),
            }),
            Caller::Model if f.confirm => self.ask(asking(f, args, Place::Here)),
            Caller::Model => Ok(()),
            Caller::Peer { .. } if !f.model_callable => Err(Refusal::NeverRemote {
                qualified: qualified(),
            }),
            Caller::Peer { .. } if !self.allow.permits(f) => Err(Refusal::NotOpen {
                qualified: qualified(),
                device: self.device.clone(),
            }),
            // The person to ask is where the conversation happens: a caller that asked
            // its user says so with `confirmed`. Otherwise only someone at this device
            // can allow the call (`serve` on a terminal); `run` has nobody to ask.
            Caller::Peer { from, confirmed } if f.confirm && !confirmed => {
                let asking = asking(f, args, Place::From(from));
                if self.confirm.confirm(&asking) {
                    Ok(())
                } else {
                    Err(Refusal::NotConfirmed {
                        device: self.device.clone(),
                        call: asking.call,
                    })
                }
            }
            Caller::Peer { .. } => Ok(()),
        }
    }

    /// Before model code's call of `f(args)` goes to the device `on`: refuses a
    /// `@no_model` function, and asks the person here about a `@confirm` one. Returns
    /// whether the call carries a yes (the host has nobody to ask).
    pub fn admit_outgoing(
        &self,
        f: &SkillFunction,
        args: &[Value],
        on: &str,
    ) -> Result<bool, Refusal> {
        if !f.model_callable {
            return Err(Refusal::NotForModel {
                qualified: f.qualified_name(),
            });
        }
        if f.confirm {
            self.ask(asking(f, args, Place::On(on)))?;
        }
        Ok(f.confirm)
    }

    fn ask(&self, asking: Asking) -> Result<(), Refusal> {
        if self.confirm.confirm(&asking) {
            Ok(())
        } else {
            Err(Refusal::SaidNo { call: asking.call })
        }
    }
}

/// Where the call in question runs, seen from this device.
#[derive(Clone, Copy)]
enum Place<'a> {
    Here,
    /// On another device, named.
    On(&'a str),
    /// Here, for another device (the name it gave).
    From(&'a str),
}

/// The question for `f(args)`, with the call as a person reads it.
fn asking(f: &SkillFunction, args: &[Value], place: Place<'_>) -> Asking {
    let rendered = args
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let mut call = format!("{}({rendered})", f.qualified_name());
    let question = match place {
        Place::Here => question(f, args, None),
        Place::On(device) => {
            call.push_str(&format!(" on {device}"));
            question(f, args, Some(device))
        }
        Place::From(from) => {
            let from: String = clean_line(from).chars().take(MAX_FROM).collect();
            let from = if from.is_empty() {
                "another device".to_string()
            } else {
                from
            };
            call.push_str(&format!(" from {from}"));
            format!("{} (asked by {from})", question(f, args, None))
        }
    };
    Asking {
        call: clean_line(&call),
        question: clean_line(&question),
    }
}

/// Words that end like a verb's "-s" but start a summary that is no request.
const NOT_VERBS: [&str; 9] = ["this", "is", "has", "was", "its", "his", "as", "us", "yes"];

/// The question a person is asked before `f(args)` runs (on the device `on`): the
/// function's summary turned into a request, "Clears the shopping list." becoming
/// "Shall I clear the shopping list?", with the argument values by name.
pub fn question(f: &SkillFunction, args: &[Value], on: Option<&str>) -> String {
    let what = request(&f.summary).unwrap_or_else(|| format!("run {} of {}", f.name, f.class));
    let mut text = format!("Shall I {what}");
    let named: Vec<(String, String)> = match args {
        [Value::Object(map)] => map.iter().map(|(k, v)| (k.clone(), spoken(v))).collect(),
        _ => args
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let name = f.params.get(i).map_or("value", |p| p.name.as_str());
                (name.replace('_', " "), spoken(v))
            })
            .collect(),
    };
    let parts: Vec<String> = named.iter().map(|(k, v)| format!("{k} {v}")).collect();
    if !parts.is_empty() {
        text.push_str(", with ");
        text.push_str(&parts.join(", "));
    }
    if let Some(on) = on {
        text.push_str(&format!(", on {on}"));
    }
    text.push('?');
    text
}

/// The request a [`question`] asks about ("Shall I clear the list?" as "clear the
/// list"), for asking it in another language.
pub fn request_in(question: &str) -> Option<&str> {
    question.strip_prefix("Shall I ")?.strip_suffix('?')
}

/// "Clears the shopping list." as "clear the shopping list"; `None` when the summary
/// does not start with a verb.
fn request(summary: &str) -> Option<String> {
    let summary = summary.trim().trim_end_matches(['.', '!', '?', ' ']);
    let (first, rest) = summary.split_once(' ').unwrap_or((summary, ""));
    if first.is_empty() || !first.chars().all(char::is_alphabetic) {
        return None;
    }
    let word = first.to_lowercase();
    if NOT_VERBS.contains(&word.as_str()) || ["the", "a", "an"].contains(&word.as_str()) {
        return None;
    }
    let verb = if let Some(stem) = word.strip_suffix("ies") {
        format!("{stem}y")
    } else if ["sses", "shes", "ches", "xes", "zes", "oes"]
        .iter()
        .any(|end| word.ends_with(end))
    {
        word[..word.len() - 2].to_string()
    } else if word.ends_with('s') && !word.ends_with("ss") {
        word[..word.len() - 1].to_string()
    } else {
        word
    };
    Some(format!("{verb} {rest}").trim_end().to_string())
}

/// A value as it is said: strings without quotes, long ones cut.
fn spoken(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut cut: String = text.chars().take(60).collect();
    if cut.len() < text.len() {
        cut.push_str("...");
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn delete_all(model_callable: bool, remote: bool) -> SkillFunction {
        SkillFunction {
            class: "NotesSkill".into(),
            name: "delete_all".into(),
            params: vec![crate::skills::Param {
                name: "list_name".into(),
                ty: crate::skills::ValueType::String,
                default: None,
                description: String::new(),
            }],
            returns: crate::skills::ValueType::Unit,
            returns_doc: String::new(),
            summary: "Deletes every note in a list.".into(),
            docstring: String::new(),
            requests: Vec::new(),
            confirm: true,
            model_callable,
            remote,
            file: Default::default(),
            line: 1,
        }
    }

    #[test]
    fn summaries_become_questions() {
        assert_eq!(
            request("Clears the shopping list.").as_deref(),
            Some("clear the shopping list")
        );
        assert_eq!(request("Empties the bin").as_deref(), Some("empty the bin"));
        assert_eq!(request("Washes up.").as_deref(), Some("wash up"));
        assert_eq!(
            request("Restart the router.").as_deref(),
            Some("restart the router")
        );
        assert_eq!(request("The current time."), None);
        assert_eq!(request(""), None);
        let f = &delete_all(true, false);
        assert_eq!(
            question(f, &[json!("shopping")], None),
            "Shall I delete every note in a list, with list name shopping?"
        );
        assert_eq!(
            question(f, &[json!({"list_name": "todo"})], Some("Kitchen")),
            "Shall I delete every note in a list, with list_name todo, on Kitchen?"
        );
        assert_eq!(
            request_in(&question(f, &[json!("x")], None)),
            Some("delete every note in a list, with list name x")
        );
    }

    /// Records what it was asked and answers `yes`.
    struct Person {
        yes: bool,
        asked: std::sync::Mutex<Vec<Asking>>,
    }

    impl Confirm for Person {
        fn confirm(&self, asking: &Asking) -> bool {
            self.asked.lock().unwrap().push(asking.clone());
            self.yes
        }
    }

    fn policy(yes: bool, allow: &[&str]) -> (Policy, Arc<Person>) {
        let person = Arc::new(Person {
            yes,
            asked: Default::default(),
        });
        let allow = AllowList::new(allow.iter().map(|e| e.to_string()).collect());
        (Policy::new("Kitchen", allow, person.clone()), person)
    }

    #[test]
    fn one_table_for_model_code_outgoing_calls_and_peers() {
        let args = [json!("shopping")];
        let (yes, person) = policy(true, &[]);
        let hidden = delete_all(false, true);
        assert!(matches!(
            yes.admit(&hidden, &args, Caller::Model),
            Err(Refusal::NotForModel { .. })
        ));
        assert!(matches!(
            yes.admit_outgoing(&hidden, &args, "Hall"),
            Err(Refusal::NotForModel { .. })
        ));
        let peer = Caller::Peer {
            from: "Hall",
            confirmed: true,
        };
        assert!(matches!(
            yes.admit(&hidden, &args, peer),
            Err(Refusal::NeverRemote { .. })
        ));
        assert!(
            person.asked.lock().unwrap().is_empty(),
            "refused before asking anyone"
        );

        let closed = delete_all(true, false);
        assert_eq!(yes.admit(&closed, &args, Caller::Model), Ok(()));
        assert_eq!(yes.admit_outgoing(&closed, &args, "Hall"), Ok(true));
        assert!(matches!(
            yes.admit(&closed, &args, peer),
            Err(Refusal::NotOpen { .. })
        ));
        let asked = person.asked.lock().unwrap().clone();
        assert_eq!(asked[0].call, "NotesSkill.delete_all(\"shopping\")");
        assert_eq!(asked[1].call, "NotesSkill.delete_all(\"shopping\") on Hall");
        assert_eq!(asked.len(), 2);

        let (no, person) = policy(false, &["NotesSkill"]);
        assert!(matches!(
            no.admit(&closed, &args, Caller::Model),
            Err(Refusal::SaidNo { .. })
        ));
        // A peer whose own user said yes is not asked again here.
        assert_eq!(no.admit(&closed, &args, peer), Ok(()));
        let unconfirmed = Caller::Peer {
            from: "Ha\u{1b}[2Jll",
            confirmed: false,
        };
        let refused = no.admit(&closed, &args, unconfirmed).unwrap_err();
        assert!(matches!(&refused, Refusal::NotConfirmed { device, .. } if device == "Kitchen"));
        let asked = person.asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 2);
        assert_eq!(
            asked[1].call,
            "NotesSkill.delete_all(\"shopping\") from Ha[2Jll"
        );
        assert!(
            asked[1].question.ends_with("(asked by Ha[2Jll)"),
            "{}",
            asked[1].question
        );
    }

    #[test]
    fn the_wildcard_leaves_out_functions_that_ask_first() {
        let f = delete_all(true, false);
        assert!(!AllowList::new(vec!["*".into()]).permits(&f));
        assert!(AllowList::new(vec!["NotesSkill.delete_all".into()]).permits(&f));
        assert!(AllowList::default().permits(&delete_all(true, true)));
        assert!(!AllowList::new(vec!["*".into()]).permits(&delete_all(false, true)));
    }
}
