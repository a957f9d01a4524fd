//! The `device` object model-written code sees (DESIGN.md 2.1), wired to the skills.
//!
//! The sandbox only ferries [`DeviceRequest`]s across; this is where they get their
//! meaning and where policy lives: a function marked `@no_model` is refused, and one
//! marked `@confirm` runs only after a person said yes. Every error is a sentence the
//! model can act on, because it reads them and tries again.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::sandbox::{DeviceHandler, DeviceRequest};
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
    registry: Arc<Registry>,
    confirm: Arc<dyn Confirm>,
}

impl Device {
    /// A `device` named `name` (as other spokes and `devices["..."]` know it) over
    /// `registry`, asking `confirm` before `@confirm` functions run.
    pub fn new(
        name: impl Into<String>,
        registry: Arc<Registry>,
        confirm: Arc<dyn Confirm>,
    ) -> Self {
        Device {
            name: name.into(),
            registry,
            confirm,
        }
    }

    fn search(&self, query: &str) -> Value {
        let hits = self
            .registry
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

    fn skill_info(&self, class: &str) -> Result<Value, String> {
        let Some(skill) = self.registry.class(class) else {
            return Err(unknown_class(&self.registry, class));
        };
        Ok(class_info(skill))
    }

    fn function_info(&self, name: &str) -> Result<Value, String> {
        let f = self.registry.function(name).map_err(|e| e.to_string())?;
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
        let f = self
            .registry
            .function(&qualified)
            .map_err(|e| e.to_string())?;
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
        self.registry
            .call(class, function, args)
            .map_err(|e| e.to_string())
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
