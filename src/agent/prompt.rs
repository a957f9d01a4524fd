//! The system prompt: who the assistant is, the `device` API, the code convention, the
//! skill catalogue as typed signatures, and few-shot examples from the skills.
//!
//! A small model on a small board cannot read a catalogue of hundreds of functions on
//! every turn, so the catalogue is cut to the functions most relevant to the utterance
//! (`Registry::search`) within a token budget, with an instruction to find the rest
//! through `device.search_skills` and `device.get_function_info`.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use serde_json::{Value, json};

use crate::hub::CodeMode;
use crate::skills::{Registry, SkillFunction};

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

/// Builds the system prompt for `utterance`.
pub fn system_prompt(registry: &Registry, context: &PromptContext<'_>, utterance: &str) -> String {
    let mut head = String::new();
    let _ = write!(
        head,
        "You are the voice assistant of the device \"{}\". Local time: {}.\n\
         Answer in the language the user spoke. Be brief: your words are spoken aloud, so use plain sentences, no markdown, no lists.\n\n",
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
         - device.search_skills(\"words\") returns [#{name, class, signature, summary}], best first.\n\
         - device.get_function_info(\"Class.fn\") returns the signature and documentation.\n\
         - print() what you need to know; catch errors with try { ... } catch (e) { print(e) }.\n\
         - Functions marked [asks first] ask the user before they run; a refusal is an error.\n\n",
    );

    let budget = context.budget_tokens;
    let used = estimate_tokens(&head);
    let callable: Vec<&SkillFunction> = registry
        .classes()
        .iter()
        .flat_map(|c| c.functions.iter())
        .filter(|f| f.model_callable)
        .collect();
    // The catalogue header and the note about functions left out.
    let note_reserve = 80;

    // The whole catalogue when it fits; else the most relevant functions first, then
    // the rest, until the budget is spent. Lines are formatted once and only as far
    // as the budget reaches, so a large catalogue costs little more than a small one.
    let left = budget.saturating_sub(used + note_reserve);
    let (mut chosen, all_fit) = take_within(registry, callable.iter().copied(), left);
    if !all_fit {
        let mut seen: HashSet<*const SkillFunction> = HashSet::new();
        let ranked = registry
            .search(utterance, usize::MAX)
            .into_iter()
            .map(|hit| hit.function)
            .filter(|f| f.model_callable)
            .chain(callable.iter().copied())
            .filter(|f| seen.insert(*f as *const SkillFunction));
        chosen = take_within(registry, ranked, left).0;
    }

    let mut by_class: HashMap<&str, Vec<&str>> = HashMap::new();
    for (f, line) in &chosen {
        by_class.entry(f.class.as_str()).or_default().push(line);
    }
    let mut out = head;
    out.push_str("Skill functions (device.Class.fn):\n");
    for class in registry.classes() {
        let Some(lines) = by_class.get(class.name.as_str()) else {
            continue;
        };
        out.push_str(&class_line(&class.name, &class.summary));
        for line in lines {
            out.push_str(line);
        }
    }
    if chosen.len() < callable.len() {
        let _ = writeln!(
            out,
            "These are the {} functions most relevant here; {} more exist. Find them with device.search_skills(\"words\") and read one with device.get_function_info(\"Class.fn\") before calling it.",
            chosen.len(),
            callable.len() - chosen.len()
        );
    }
    let mut used = estimate_tokens(&out);

    // Few-shot examples from the classes shown, while the budget lasts.
    let mut examples = String::new();
    let mut count = 0;
    'classes: for class in registry.classes() {
        if !by_class.contains_key(class.name.as_str()) {
            continue;
        }
        for example in &class.examples {
            let text = match context.mode {
                CodeMode::Fenced => format!(
                    "User: {}\nYou:\n```rhai\n{}\n```\n",
                    example.request,
                    example.code.trim_end()
                ),
                CodeMode::Tools => format!(
                    "User: {}\nYou call run_code with:\n{}\n",
                    example.request,
                    example.code.trim_end()
                ),
            };
            if count >= MAX_EXAMPLES || used + estimate_tokens(&text) + 10 > budget {
                break 'classes;
            }
            used += estimate_tokens(&text);
            examples.push_str(&text);
            count += 1;
        }
    }
    if !examples.is_empty() {
        out.push_str("\nExamples:\n");
        out.push_str(&examples);
    }
    out
}

/// `functions` in order with their catalogue lines, while they fit in `budget`
/// tokens (a class line counts with the first function of its class); and whether
/// all of them did.
fn take_within<'r>(
    registry: &Registry,
    functions: impl Iterator<Item = &'r SkillFunction>,
    budget: usize,
) -> (Vec<(&'r SkillFunction, String)>, bool) {
    let mut taken = Vec::new();
    let mut classes: HashSet<&str> = HashSet::new();
    let mut spent = 0;
    for f in functions {
        let line = function_line(f);
        let mut cost = estimate_tokens(&line) + 1;
        if classes.insert(f.class.as_str()) {
            cost += registry
                .class(&f.class)
                .map_or(0, |c| estimate_tokens(&class_line(&c.name, &c.summary)) + 1);
        }
        if spent + cost > budget {
            return (taken, false);
        }
        spent += cost;
        taken.push((f, line));
    }
    (taken, true)
}

fn class_line(name: &str, summary: &str) -> String {
    format!("{name}: {summary}\n")
}

fn function_line(f: &SkillFunction) -> String {
    let mark = if f.confirm { " [asks first]" } else { "" };
    format!("  {}  {}{}\n", f.signature(), f.summary, mark)
}
