//! The system prompt: who the assistant is, the `device` API, the code convention, the
//! skill catalogue as typed signatures, and few-shot examples from the skills.
//!
//! A small model on a small board cannot read a catalogue of hundreds of functions on
//! every turn, so the catalogue is cut to the functions most relevant to the utterance
//! within a token budget, with an instruction to find the rest through
//! `device.search_skills` and `device.get_function_info`.
//!
//! Several spokes share a home, and someone in the kitchen may ask for the living room's
//! TV, so the catalogue covers every online device: this one's classes first, then each
//! other device's under a heading with its `devices["key"]`. Local and remote functions
//! rank on one scale (the search indexes built when the skills loaded or a registration
//! arrived), so the budget goes to what the utterance is about wherever it lives, and
//! the few-shot examples are the most relevant ones rather than the first in the files.
//! A class that is the same on several devices (the bundled skills) is shown once with
//! the devices that have it: a copy per room would spend the budget on repetition.
//! Offline devices are left out, since the model could not reach them.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use serde_json::{Value, json};

use crate::hub::CodeMode;
use crate::mqtt::peers::{Peer, Peers};
use crate::skills::search::{self, Doc};
use crate::skills::{Example, Registry, SkillFunction};
use crate::text::normalise;

/// Most few-shot examples in one prompt.
const MAX_EXAMPLES: usize = 4;

/// Tokens estimated the way the budgets count them: about four characters each.
pub fn estimate_tokens(text: &str) -> usize {
    text.len().div_ceil(4)
}

/// Everything the prompt needs besides the skills.
#[derive(Debug, Clone)]
pub struct PromptContext<'a> {
    /// This device's display name.
    pub device_name: &'a str,
    /// The local time, already rendered (e.g. "Monday 23 November 2026, 09:30 CET").
    pub local_time: &'a str,
    /// How code is sent.
    pub mode: CodeMode,
    /// Token budget of the whole system prompt.
    pub budget_tokens: usize,
    /// The language the user spoke, by name ("German"), when speech to text knows it.
    pub language: Option<&'a str>,
}

/// The local time as the prompt shows it.
pub fn local_time_now() -> String {
    let now = jiff::Zoned::now();
    now.strftime("%A %-d %B %Y, %H:%M (%Z)").to_string()
}

/// The `run_code` tool offered in tool-call mode.
pub fn code_tool() -> Value {
    json!([{
        "type": "function",
        "function": {
            "name": CODE_TOOL,
            "description": "Run Rhai code on the device. What it prints and its last value come back to you.",
            "parameters": {
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "The Rhai code to run."}
                },
                "required": ["code"]
            }
        }
    }])
}

/// The name of the code tool.
pub const CODE_TOOL: &str = "run_code";

/// Room kept for the note about functions left out.
const NOTE_RESERVE: usize = 80;

/// Builds the system prompt for `utterance` over this device's skills (`registry`) and
/// those of the online devices among `peers`.
pub fn system_prompt(
    registry: &Registry,
    peers: Option<&Peers>,
    context: &PromptContext<'_>,
    utterance: &str,
) -> String {
    let catalogue = Catalogue::build(registry, peers, context.device_name);
    let budget = context.budget_tokens;
    let mut out = head(context, &catalogue);
    out.push_str(&catalogue.heading(0));
    let used = estimate_tokens(&out);
    let left = budget.saturating_sub(used + NOTE_RESERVE);
    let entries = &catalogue.entries;
    let docs: Vec<Doc<'_>> = entries.iter().map(|e| e.doc).collect();
    let scores = search::score(&docs, utterance);

    // The whole catalogue when it fits; else the most relevant functions first, then
    // the rest in catalogue order, until the budget is spent. Lines are formatted once
    // and only as far as the budget reaches, so a large catalogue costs little more
    // than a small one.
    let mut lines = catalogue.take_within(0..entries.len(), left);
    let mut taken = lines.iter().flatten().count();
    if taken < entries.len() {
        let mut ranked: Vec<usize> = (0..entries.len()).collect();
        // Stable: equally relevant functions keep catalogue order, this device's first.
        ranked.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]));
        lines = catalogue.take_within(ranked.into_iter(), left);
        taken = lines.iter().flatten().count();
    }

    let mut host = 0;
    for (ci, class) in catalogue.classes.iter().enumerate() {
        let mut class_lines = class.entries.clone().filter_map(|e| lines[e].as_deref());
        let Some(first) = class_lines.next() else {
            continue;
        };
        if class.hosts[0] != host {
            host = class.hosts[0];
            out.push_str(&catalogue.heading(host));
        }
        out.push_str(&catalogue.class_line(ci));
        out.push_str(first);
        class_lines.for_each(|line| out.push_str(line));
    }
    if taken < entries.len() {
        let _ = writeln!(
            out,
            "These are the {taken} functions most relevant here; {} more exist. Find them with device.search_skills(\"words\") and read one with device.get_function_info(\"Class.fn\") before calling it.",
            entries.len() - taken
        );
    }
    let left = budget.saturating_sub(estimate_tokens(&out));
    let examples = examples(&catalogue, &lines, &scores, context.mode, left);
    if !examples.is_empty() {
        out.push_str("\nExamples:\n");
        out.push_str(&examples);
    }
    out
}

/// Who and where the assistant is, how code is sent, the `device` API and, with other
/// devices online, the rule for reaching them and their keys.
fn head(context: &PromptContext<'_>, catalogue: &Catalogue<'_>) -> String {
    let mut head = String::new();
    let answer = match context.language {
        Some(language) => format!("The user spoke {language}; answer in {language}."),
        None => "Answer in the language the user spoke.".to_string(),
    };
    let _ = write!(
        head,
        "You are the voice assistant of the device \"{}\". Local time: {}.\n\
         {answer} Be brief: your words are spoken aloud, so use plain sentences, no markdown, no lists.\n\n",
        context.device_name, context.local_time
    );
    match context.mode {
        CodeMode::Fenced => head.push_str(
            "To act on the device or to look something up, write Rhai code in a fenced block that starts with ```rhai and ends with ```. \
             It runs right away; what it prints and its last value come back to you in the next message, then you answer the user. \
             Write no code when none is needed.\n",
        ),
        CodeMode::Tools => head.push_str(
            "To act on the device or to look something up, call the run_code tool with Rhai code. \
             What it prints and its last value come back to you, then you answer the user. \
             Call no tool when none is needed.\n",
        ),
    }
    head.push_str(
        "The code has only Rhai and the `device` object: no files, network, clock or modules except through the skills below.\n\
         - device.Class.fn(a, b) calls a skill function; device.Class.fn(#{name: value}) passes named arguments.\n\
         - device.search_skills(\"words\") returns [#{name, class, signature, summary, devices, online}], best first; devices are the devices that have the function, online those of them online now.\n\
         - device.get_function_info(\"Class.fn\") returns the signature and documentation.\n\
         - print() what you need to know; catch errors with try { ... } catch (e) { print(e) }.\n\
         - Functions marked [asks first] ask the user before they run; a refusal is an error.\n",
    );
    let others = &catalogue.hosts[1..];
    if !others.is_empty() {
        let _ = write!(
            head,
            "\nOther devices in the home have skills too. Use this device's skills unless the user names another room or device, \
             or only another device has the skill; for another device's skill write devices[\"key\"].Class.fn(...) with its key. \
             This device: {}, or just device. Online devices:",
            catalogue.hosts[0].label()
        );
        // A household of long names must not crowd out the catalogue.
        let room = context.budget_tokens / 4;
        let mut spent = 0;
        for (i, host) in others.iter().enumerate() {
            let end = if i + 1 < others.len() { "," } else { "." };
            let item = format!(" {}{end}", host.label());
            spent += estimate_tokens(&item);
            if spent > room {
                let _ = write!(
                    head,
                    " and {} more (device.search_skills finds their skills).",
                    others.len() - i
                );
                break;
            }
            head.push_str(&item);
        }
        head.push('\n');
    }
    head.push('\n');
    head
}

/// Few-shot examples of the classes shown, the most relevant first (the best score of
/// the functions an example calls, else of its class), at most [`MAX_EXAMPLES`] and
/// within `budget` tokens. An example of a class only other devices have is rewritten
/// to reach its device, as the model must.
fn examples(
    catalogue: &Catalogue<'_>,
    lines: &[Option<String>],
    scores: &[f32],
    mode: CodeMode,
    budget: usize,
) -> String {
    let mut candidates: Vec<(f32, &Shown<'_>, &Example)> = Vec::new();
    for class in &catalogue.classes {
        let shown: Vec<usize> = class
            .entries
            .clone()
            .filter(|e| lines[*e].is_some())
            .collect();
        let Some(best) = shown.iter().map(|e| scores[*e]).reduce(f32::max) else {
            continue;
        };
        for example in class.examples {
            let score = shown
                .iter()
                .filter(|e| {
                    let name = &catalogue.entries[**e].function.name;
                    example.code.contains(&format!(".{name}("))
                })
                .map(|e| scores[*e])
                .reduce(f32::max)
                .unwrap_or(best);
            candidates.push((score, class, example));
        }
    }
    // Stable: equally relevant examples keep catalogue and file order.
    candidates.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut out = String::new();
    let mut used = 0;
    let mut count = 0;
    for (_, class, example) in candidates {
        if count == MAX_EXAMPLES {
            break;
        }
        let code = example.code.trim_end();
        let code = match class.hosts[0] {
            0 => code.to_string(),
            host => reach(code, class.name, &catalogue.hosts[host].key),
        };
        let text = match mode {
            CodeMode::Fenced => format!("User: {}\nYou:\n```rhai\n{code}\n```\n", example.request),
            CodeMode::Tools => format!(
                "User: {}\nYou call run_code with:\n{code}\n",
                example.request
            ),
        };
        let cost = estimate_tokens(&text);
        if used + cost + 10 > budget {
            continue;
        }
        used += cost;
        count += 1;
        out.push_str(&text);
    }
    out
}

/// `code` with each `device.{class}.` written `devices["{key}"].{class}.`.
fn reach(code: &str, class: &str, key: &str) -> String {
    let plain = format!("device.{class}.");
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find(&plain) {
        out.push_str(&rest[..at]);
        // `mydevice.X.` is some other variable.
        let inside_a_name = out
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if inside_a_name {
            out.push_str(&plain);
        } else {
            let _ = write!(out, "devices[\"{key}\"].{class}.");
        }
        rest = &rest[at + plain.len()..];
    }
    out.push_str(rest);
    out
}

/// A device whose skills the prompt shows; the first is this one.
struct Host<'a> {
    name: &'a str,
    key: String,
}

impl Host<'_> {
    /// `"Living Room TV" devices["living-room-tv"]`.
    fn label(&self) -> String {
        format!("\"{}\" devices[\"{}\"]", self.name, self.key)
    }
}

/// One class as the prompt shows it: its text as the first of `hosts` has it (where
/// it is listed), and every online device that has the same class.
struct Shown<'a> {
    name: &'a str,
    summary: &'a str,
    examples: &'a [Example],
    /// Its functions' positions in [`Catalogue::entries`].
    entries: std::ops::Range<usize>,
    /// Positions in [`Catalogue::hosts`].
    hosts: Vec<usize>,
}

/// One function of the catalogue, with its text for ranking.
struct Entry<'a> {
    function: &'a SkillFunction,
    doc: Doc<'a>,
}

/// The classes of every online device, each distinct class once, in catalogue order:
/// this device's by name, then each other device's (devices by name).
struct Catalogue<'a> {
    hosts: Vec<Host<'a>>,
    classes: Vec<Shown<'a>>,
    entries: Vec<Entry<'a>>,
    /// Classes by name, to find the same class on another device.
    by_name: HashMap<&'a str, Vec<usize>>,
}

impl<'a> Catalogue<'a> {
    fn build(registry: &'a Registry, peers: Option<&'a Peers>, own_name: &'a str) -> Self {
        let mut catalogue = Catalogue {
            hosts: vec![Host {
                name: own_name,
                key: normalise(own_name),
            }],
            classes: Vec::new(),
            entries: Vec::new(),
            by_name: HashMap::new(),
        };
        for (ci, class) in registry.classes().iter().enumerate() {
            let functions = class
                .functions
                .iter()
                .enumerate()
                .filter(|(_, f)| f.model_callable)
                .map(|(fi, f)| Entry {
                    function: f,
                    doc: registry.index().doc(ci, fi),
                });
            catalogue.add(0, &class.name, &class.summary, &class.examples, functions);
        }
        let mut online: Vec<&Peer> = peers
            .into_iter()
            .flat_map(Peers::all)
            .filter(|p| p.online && p.registered)
            .collect();
        online.sort_by(|a, b| a.name.cmp(&b.name));
        for peer in online {
            let host = catalogue.hosts.len();
            catalogue.hosts.push(Host {
                name: &peer.name,
                key: peer.key(),
            });
            for (ci, class) in peer.classes.iter().enumerate() {
                let functions = class.functions.iter().enumerate().map(|(fi, f)| Entry {
                    function: f,
                    doc: peer.index.doc(ci, fi),
                });
                catalogue.add(
                    host,
                    &class.name,
                    &class.summary,
                    &class.examples,
                    functions,
                );
            }
        }
        catalogue
    }

    /// Adds a class of device `host`; one already listed with the same text only
    /// gains the device.
    fn add(
        &mut self,
        host: usize,
        name: &'a str,
        summary: &'a str,
        examples: &'a [Example],
        functions: impl Iterator<Item = Entry<'a>>,
    ) {
        let functions: Vec<Entry<'a>> = functions.collect();
        if functions.is_empty() {
            return;
        }
        let same = self.by_name.get(name).and_then(|seen| {
            seen.iter().copied().find(|&ci| {
                let class = &self.classes[ci];
                class.summary == summary
                    && class.entries.len() == functions.len()
                    && self.entries[class.entries.clone()]
                        .iter()
                        .zip(&functions)
                        .all(|(a, b)| same_function(a.function, b.function))
            })
        });
        if let Some(ci) = same {
            let hosts = &mut self.classes[ci].hosts;
            if !hosts.contains(&host) {
                hosts.push(host);
            }
            return;
        }
        let first = self.entries.len();
        self.entries.extend(functions);
        self.by_name
            .entry(name)
            .or_default()
            .push(self.classes.len());
        self.classes.push(Shown {
            name,
            summary,
            examples,
            entries: first..self.entries.len(),
            hosts: vec![host],
        });
    }

    /// The heading of device `host`'s classes; a spoke alone keeps the plain one.
    fn heading(&self, host: usize) -> String {
        match host {
            0 if self.hosts.len() == 1 => "Skill functions (device.Class.fn):\n".to_string(),
            0 => "Skill functions of this device (device.Class.fn):\n".to_string(),
            _ => {
                let host = &self.hosts[host];
                format!(
                    "Skill functions of \"{}\" (devices[\"{}\"].Class.fn):\n",
                    host.name, host.key
                )
            }
        }
    }

    /// The line of class `ci`, naming the other devices that have it.
    fn class_line(&self, ci: usize) -> String {
        let class = &self.classes[ci];
        let mut line = format!("{}: {}", class.name, class.summary);
        if let [_, others @ ..] = class.hosts.as_slice()
            && !others.is_empty()
        {
            let keys: Vec<String> = others
                .iter()
                .map(|h| format!("devices[\"{}\"]", self.hosts[*h].key))
                .collect();
            let _ = write!(line, " (also on {})", keys.join(", "));
        }
        line.push('\n');
        line
    }

    /// The entries of `order` with their catalogue lines while they fit in `budget`
    /// tokens (a class line, and another device's heading, count with the first
    /// function under them); `None` for the entries left out.
    fn take_within(
        &self,
        order: impl Iterator<Item = usize>,
        budget: usize,
    ) -> Vec<Option<String>> {
        let mut lines = vec![None; self.entries.len()];
        let mut classes: HashSet<usize> = HashSet::new();
        let mut hosts: HashSet<usize> = HashSet::from([0]);
        let mut spent = 0;
        for e in order {
            let ci = self.classes.partition_point(|c| c.entries.end <= e);
            let host = self.classes[ci].hosts[0];
            let line = function_line(self.entries[e].function);
            let mut cost = estimate_tokens(&line) + 1;
            if !classes.contains(&ci) {
                cost += estimate_tokens(&self.class_line(ci)) + 1;
                if !hosts.contains(&host) {
                    cost += estimate_tokens(&self.heading(host)) + 1;
                }
            }
            if spent + cost > budget {
                break;
            }
            spent += cost;
            classes.insert(ci);
            hosts.insert(host);
            lines[e] = Some(line);
        }
        lines
    }
}

/// Whether two functions read the same to the model (their class's summary aside,
/// which the caller compares): name, parameters, return type and documentation.
fn same_function(a: &SkillFunction, b: &SkillFunction) -> bool {
    a.name == b.name
        && a.params == b.params
        && a.returns == b.returns
        && a.summary == b.summary
        && a.docstring == b.docstring
        && a.confirm == b.confirm
}

fn function_line(f: &SkillFunction) -> String {
    let mark = if f.confirm { " [asks first]" } else { "" };
    format!("  {}  {}{}\n", f.signature(), f.summary, mark)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostSettings;
    use crate::mqtt::PeerLimits;
    use crate::mqtt::protocol::Registration;

    /// A skill file of class `class` with parameterless functions `(name, summary)`
    /// and examples `(request, code)`.
    fn skill(
        class: &str,
        summary: &str,
        functions: &[(&str, &str)],
        examples: &[(&str, &str)],
    ) -> String {
        let mut text = format!("//! {summary}\n//!\n//! @class {class}\n");
        for (request, code) in examples {
            text.push_str(&format!("//! @example {request}\n//! {code}\n"));
        }
        text.push('\n');
        for (name, summary) in functions {
            text.push_str(&format!("/// {summary}\nfn {name}() {{\n    1\n}}\n\n"));
        }
        text
    }

    fn registry(files: &[String]) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        for (i, text) in files.iter().enumerate() {
            std::fs::write(dir.path().join(format!("s{i}.rhai")), text).unwrap();
        }
        let settings = HostSettings {
            data_dir: dir.path().join("data"),
            ..HostSettings::default()
        };
        let (registry, errors) = Registry::load(dir.path(), &settings);
        assert!(errors.is_empty(), "{errors:?}");
        registry
    }

    /// Adds device `id` called `name` with the skills of `files`, as its registration
    /// would arrive.
    fn join(peers: &mut Peers, id: &str, name: &str, files: &[String], online: bool) {
        let registration = Registration::of(&registry(files), id, name, |f| f.model_callable);
        let payload = serde_json::to_vec(&registration).unwrap();
        peers.set_registration(id, &payload).unwrap();
        let status: &[u8] = if online { b"online" } else { b"offline" };
        peers.set_status(id, status).unwrap();
    }

    fn prompt(
        registry: &Registry,
        peers: Option<&Peers>,
        budget: usize,
        utterance: &str,
    ) -> String {
        let context = PromptContext {
            device_name: "Kitchen",
            local_time: "Monday 23 November 2026, 09:30 (CET)",
            mode: CodeMode::Fenced,
            budget_tokens: budget,
            language: None,
        };
        system_prompt(registry, peers, &context, utterance)
    }

    fn tv() -> String {
        skill(
            "TvSkill",
            "The television.",
            &[("power_on", "Switch the TV on")],
            &[("Turn on the TV", "device.TvSkill.power_on()")],
        )
    }

    #[test]
    fn other_devices_follow_this_one_under_their_keys() {
        let local = registry(&[skill(
            "LightSkill",
            "The lights.",
            &[("on", "Light up.")],
            &[],
        )]);
        let mut peers = Peers::new("Kitchen", PeerLimits::default());
        join(&mut peers, "tv1", "Living Room TV", &[tv()], true);
        let garage = skill("GarageSkill", "The garage.", &[("open", "Open it.")], &[]);
        join(&mut peers, "garage", "Garage", &[garage], false);
        let text = prompt(&local, Some(&peers), 3000, "turn on the tv");

        let light = text.find("Skill functions of this device (device.Class.fn):\nLightSkill: The lights.\n  on() -> ()  Light up.\n");
        let tv = text.find(
            "Skill functions of \"Living Room TV\" (devices[\"living-room-tv\"].Class.fn):\n\
             TvSkill: The television.\n  power_on() -> ()  Switch the TV on\n",
        );
        assert!(light.is_some() && tv.is_some() && light < tv, "{text}");
        assert!(
            text.contains("unless the user names another room or device"),
            "{text}"
        );
        assert!(
            text.contains("This device: \"Kitchen\" devices[\"kitchen\"], or just device. Online devices: \"Living Room TV\" devices[\"living-room-tv\"].\n"),
            "{text}"
        );
        // Offline: neither its skills nor its key.
        assert!(
            !text.contains("GarageSkill") && !text.contains("garage"),
            "{text}"
        );
    }

    #[test]
    fn alone_the_prompt_is_about_this_device() {
        let local = registry(&[tv()]);
        let mut peers = Peers::new("Kitchen", PeerLimits::default());
        join(
            &mut peers,
            "hall",
            "Hall",
            &[skill("HallSkill", "Hall.", &[("x", "X.")], &[])],
            false,
        );
        for peers in [None, Some(&peers)] {
            let text = prompt(&local, peers, 3000, "turn on the tv");
            assert!(
                text.contains("Skill functions (device.Class.fn):\nTvSkill"),
                "{text}"
            );
            assert!(
                !text.contains("devices[") && !text.contains("another room"),
                "{text}"
            );
            assert!(
                text.contains("```rhai\ndevice.TvSkill.power_on()\n```"),
                "{text}"
            );
        }
    }

    #[test]
    fn a_class_on_several_devices_is_shown_once() {
        let clock = || skill("ClockSkill", "The time.", &[("now", "The time now.")], &[]);
        let radio = || skill("RadioSkill", "The radio.", &[("play", "Play it.")], &[]);
        let local = registry(&[clock()]);
        let mut peers = Peers::new("Kitchen", PeerLimits::default());
        join(&mut peers, "a", "Attic", &[clock(), radio()], true);
        join(&mut peers, "b", "Bedroom", &[clock(), radio()], true);
        // The same name with other documentation is another class.
        let other = skill(
            "RadioSkill",
            "The radio.",
            &[("play", "Play the cellar's radio.")],
            &[],
        );
        join(&mut peers, "c", "Cellar", &[other], true);
        let text = prompt(&local, Some(&peers), 3000, "what time is it");

        assert_eq!(text.matches("ClockSkill").count(), 1, "{text}");
        assert!(
            text.contains(
                "ClockSkill: The time. (also on devices[\"attic\"], devices[\"bedroom\"])\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("(devices[\"attic\"].Class.fn):\nRadioSkill: The radio. (also on devices[\"bedroom\"])\n  play() -> ()  Play it.\n"),
            "{text}"
        );
        // Bedroom has nothing of its own to show.
        assert!(!text.contains("(devices[\"bedroom\"].Class.fn)"), "{text}");
        assert!(
            text.contains("(devices[\"cellar\"].Class.fn):\nRadioSkill: The radio.\n  play() -> ()  Play the cellar's radio.\n"),
            "{text}"
        );
    }

    #[test]
    fn the_budget_holds_and_relevance_decides_across_devices() {
        let words = ["light", "music", "timer", "blind", "fan"];
        let many = |device: usize| -> Vec<String> {
            (0..10)
                .map(|c| {
                    let functions: Vec<(String, String)> = (0..10)
                        .map(|f| {
                            let noun = words[(c + f) % words.len()];
                            (
                                format!("set_{noun}_{f}"),
                                format!("Set the {noun} number {f} in zone {c}."),
                            )
                        })
                        .collect();
                    let functions: Vec<(&str, &str)> = functions
                        .iter()
                        .map(|(n, s)| (n.as_str(), s.as_str()))
                        .collect();
                    skill(
                        &format!("D{device}Zone{c}Skill"),
                        &format!("Zone {c}."),
                        &functions,
                        &[],
                    )
                })
                .collect()
        };
        let local = registry(&many(9));
        let mut peers = Peers::new("Kitchen", PeerLimits::default());
        for d in 0..5 {
            let mut files = many(d);
            if d == 3 {
                files.push(skill(
                    "GarageSkill",
                    "The garage.",
                    &[("open_door", "Open the garage door.")],
                    &[],
                ));
            }
            join(
                &mut peers,
                &format!("room{d}"),
                &format!("Room {d}"),
                &files,
                true,
            );
        }
        for budget in [1000, 3000] {
            let text = prompt(&local, Some(&peers), budget, "open the garage door");
            assert!(
                estimate_tokens(&text) <= budget,
                "{} tokens over {budget}",
                estimate_tokens(&text)
            );
            assert!(
                text.contains("(devices[\"room-3\"].Class.fn):\nGarageSkill: The garage.\n  open_door() -> ()  Open the garage door.\n"),
                "{text}"
            );
            assert!(
                text.contains("more exist. Find them with device.search_skills"),
                "{text}"
            );
        }
    }

    #[test]
    fn examples_are_the_most_relevant_and_reach_their_device() {
        let alarm = skill(
            "AlarmSkill",
            "Alarms.",
            &[("set", "Set an alarm.")],
            &[
                ("Wake me at six", "device.AlarmSkill.set()"),
                ("Wake me at seven", "device.AlarmSkill.set()"),
            ],
        );
        let notes = skill(
            "BNotesSkill",
            "Notes.",
            &[("add", "Add a note."), ("read", "Read the notes.")],
            &[
                ("Note milk", "device.BNotesSkill.add()"),
                ("Read my notes", "device.BNotesSkill.read()"),
            ],
        );
        let local = registry(&[alarm, notes]);
        let mut peers = Peers::new("Kitchen", PeerLimits::default());
        join(&mut peers, "tv1", "Living Room TV", &[tv()], true);
        let text = prompt(&local, Some(&peers), 3000, "switch the tv on");
        let examples = &text[text.find("\nExamples:\n").expect("examples")..];
        assert!(
            examples.starts_with("\nExamples:\nUser: Turn on the TV\nYou:\n```rhai\ndevices[\"living-room-tv\"].TvSkill.power_on()\n```\n"),
            "{examples}"
        );
        assert_eq!(
            examples.matches("User:").count(),
            MAX_EXAMPLES,
            "{examples}"
        );
        // For reading notes, the example that reads them comes before the one that adds.
        let text = prompt(&local, Some(&peers), 3000, "read my notes");
        let examples = &text[text.find("\nExamples:\n").unwrap()..];
        assert!(
            examples.starts_with("\nExamples:\nUser: Read my notes\n"),
            "{examples}"
        );
    }

    #[test]
    fn remote_examples_are_rewritten_only_where_the_class_is_called() {
        assert_eq!(
            reach(
                "let x = device.TvSkill.power_on();\nmydevice.TvSkill.on(); device.ClockSkill.now()",
                "TvSkill",
                "tv"
            ),
            "let x = devices[\"tv\"].TvSkill.power_on();\nmydevice.TvSkill.on(); device.ClockSkill.now()"
        );
    }
}
