//! Suggested `@request` lines: ways people ask for a function, drafted by the hub's
//! model for the author to keep (`strawberry-spoke skills suggest`).
//!
//! Search finds a function far more often when its file says how people ask for it
//! (BENCHMARKS.md, "Finding skills"), but a hobbyist rarely thinks of "I fancy a
//! cuppa" for `KettleSkill.switch_on`. A language model given only the documentation
//! writes such lines well: the benchmark's were written that way. They are drafted
//! once, into the file, where the author reads, edits or drops them, rather than
//! generated behind the author's back at every start: a skill's documentation stays
//! what its file says, the same on every spoke, and no hub tokens are spent at run time.
//!
//! This module is the text side (the question, reading the answer, editing the file);
//! the CLI asks the hub.

use std::collections::HashMap;

use crate::skills::{ClassDoc, MAX_REQUEST_CHARS, SkillFunction};

/// Requests asked for per function: a few different ones help more than many alike.
pub const PER_FUNCTION: usize = 4;
/// Functions asked about in one question, so that the answer (about 40 tokens a
/// function) fits well within a hub's `max_tokens`.
pub const PER_QUESTION: usize = 8;

/// Why an answer gave nothing to add.
#[derive(Debug, thiserror::Error)]
pub enum SuggestError {
    /// No JSON object in it.
    #[error(
        "the hub's model did not answer with a JSON object of requests (it began: {start:?}); try again, or a model that follows instructions better"
    )]
    NotJson {
        /// The first characters of the answer.
        start: String,
    },
    /// A JSON object, but nothing usable for the functions asked about.
    #[error(
        "the hub's model answered without usable requests for {class} (keys {keys:?}); try again"
    )]
    Empty {
        /// The class asked about.
        class: String,
        /// The keys it answered with.
        keys: Vec<String>,
    },
    /// The file changed since it was read: the function is not where it was.
    #[error(
        "line {line} is no longer `fn {function}`: the file changed since it was read; run `skills suggest` again"
    )]
    Moved {
        /// The function.
        function: String,
        /// Where it was.
        line: usize,
    },
}

/// Requests for one function, to go above its `fn` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Suggestion {
    /// The function's name.
    pub function: String,
    /// The 1-based line of its `fn`.
    pub line: usize,
    /// The requests, cleaned and bounded.
    pub requests: Vec<String>,
}

/// The functions of `class` the model may call that have no `@request` lines yet.
pub fn wanting(class: &ClassDoc) -> Vec<&SkillFunction> {
    class
        .functions
        .iter()
        .filter(|f| f.model_callable && f.requests.is_empty())
        .collect()
}

/// The system and user messages that ask for requests for `functions` of `class`.
pub fn question(class: &ClassDoc, functions: &[&SkillFunction]) -> (String, String) {
    let system = format!(
        "You help people write skills for a home voice assistant. For each function below, \
         write {PER_FUNCTION} different short requests (3 to 10 words) that a person at home \
         would say to the assistant and that this function serves, rather than the other \
         functions listed: casual and spoken, with everyday synonyms, indirect requests and \
         statements of a need (\"it's dark in here\" for a light), questions, and realistic \
         values for parameters. At least two of them should use words that are not in the \
         function's name or summary. Answer with one JSON object and nothing else: each key a \
         function name, each value a list of {PER_FUNCTION} strings."
    );
    let mut user = format!("Skill {}: {}\n", class.name, class.summary);
    if !class.description.is_empty() {
        user.push_str(&class.description);
        user.push('\n');
    }
    user.push_str("\nFunctions:\n");
    for f in functions {
        user.push_str(&format!("- {}: {}", f.signature(), f.summary));
        if !f.docstring.is_empty() {
            user.push(' ');
            user.push_str(&f.docstring.replace('\n', " "));
        }
        user.push('\n');
    }
    (system, user)
}

/// Reads the model's answer: the requests for each of `functions` it gave, at most
/// [`PER_FUNCTION`] each, single lines of at most [`MAX_REQUEST_CHARS`] characters;
/// names it was not asked about and anything that is not a string are ignored.
pub fn read_answer(
    class: &ClassDoc,
    functions: &[&SkillFunction],
    answer: &str,
) -> Result<Vec<Suggestion>, SuggestError> {
    let not_json = || SuggestError::NotJson {
        start: answer.chars().take(80).collect(),
    };
    // Models wrap JSON in prose or code fences: take the outermost object.
    let start = answer.find('{').ok_or_else(not_json)?;
    let end = answer
        .rfind('}')
        .filter(|e| *e > start)
        .ok_or_else(not_json)?;
    let object: HashMap<String, serde_json::Value> =
        serde_json::from_str(&answer[start..=end]).map_err(|_| not_json())?;
    let suggestions: Vec<Suggestion> = functions
        .iter()
        .filter_map(|f| {
            let given = object.get(&f.name)?.as_array()?;
            let mut requests: Vec<String> = Vec::new();
            for text in given.iter().filter_map(|v| v.as_str()) {
                let text = one_line(text);
                let fits = !text.is_empty() && text.chars().count() <= MAX_REQUEST_CHARS;
                if fits && !requests.contains(&text) && requests.len() < PER_FUNCTION {
                    requests.push(text);
                }
            }
            (!requests.is_empty()).then(|| Suggestion {
                function: f.name.clone(),
                line: f.line,
                requests,
            })
        })
        .collect();
    if suggestions.is_empty() {
        let mut keys: Vec<String> = object
            .into_keys()
            .map(|k| k.chars().take(40).collect())
            .collect();
        keys.sort();
        keys.truncate(8);
        return Err(SuggestError::Empty {
            class: class.name.clone(),
            keys,
        });
    }
    Ok(suggestions)
}

/// A request as one clean line: no control characters or line breaks, single spaces.
fn one_line(text: &str) -> String {
    crate::text::clean_text(text)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// `source` with each suggestion's `/// @request` lines added at the end of its
/// function's doc comment (after the last `///` line above the `fn`, so a blank line
/// between the comment and the `fn` stays where it is), in the file's line endings.
pub fn insert(source: &str, suggestions: &[Suggestion]) -> Result<String, SuggestError> {
    let mut lines: Vec<String> = source.lines().map(str::to_string).collect();
    for s in suggestions {
        // The loader's own reading of a `fn` line, so any spacing it accepts is accepted.
        let at_fn = lines
            .get(s.line.wrapping_sub(1))
            .and_then(|l| crate::skills::fn_line(s.line, 0, l.trim()))
            .is_some_and(|f| f.name == s.function);
        if !at_fn {
            return Err(SuggestError::Moved {
                function: s.function.clone(),
                line: s.line,
            });
        }
    }
    let mut by_line: Vec<&Suggestion> = suggestions.iter().collect();
    // From the bottom up, so the line numbers above stay right.
    by_line.sort_by_key(|s| std::cmp::Reverse(s.line));
    for s in by_line {
        let fn_at = s.line - 1;
        let indent: String = lines
            .get(fn_at)
            .map(|l| l.chars().take_while(|c| c.is_whitespace()).collect())
            .unwrap_or_default();
        let mut at = fn_at;
        while at > 0 && lines[at - 1].trim().is_empty() {
            at -= 1;
        }
        if !(at > 0 && lines[at - 1].trim_start().starts_with("///")) {
            at = fn_at;
        }
        for request in s.requests.iter().rev() {
            lines.insert(at, format!("{indent}/// @request {request}"));
        }
    }
    let newline = if source.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    let mut out = lines.join(newline);
    if source.ends_with('\n') {
        out.push_str(newline);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skills::ValueType;

    fn class() -> ClassDoc {
        let function = |name: &str, line: usize| SkillFunction {
            class: "TvSkill".into(),
            name: name.into(),
            params: Vec::new(),
            returns: ValueType::Unit,
            returns_doc: String::new(),
            summary: "Switch the TV on.".into(),
            docstring: String::new(),
            requests: Vec::new(),
            confirm: false,
            model_callable: true,
            remote: false,
            file: Default::default(),
            line,
        };
        ClassDoc {
            name: "TvSkill".into(),
            summary: "The TV.".into(),
            description: String::new(),
            examples: Vec::new(),
            functions: vec![function("power_on", 4), function("power_off", 8)],
        }
    }

    #[test]
    fn answers_are_bounded_and_unusable_ones_are_errors() {
        let class = class();
        let asked = wanting(&class);
        let long = "a".repeat(MAX_REQUEST_CHARS + 1);
        let answer = format!(
            r#"{{"power_on": ["telly on", 7, "{long}", "b", "c", "d", "e"], "power_off": "not a list"}}"#
        );
        let read = read_answer(&class, &asked, &answer).unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].requests, ["telly on", "b", "c", "d"]);
        assert_eq!(read[0].line, 4);
        let err = read_answer(&class, &asked, r#"{"volume": ["up"]}"#).unwrap_err();
        assert!(matches!(err, SuggestError::Empty { .. }), "{err}");
        let err = read_answer(&class, &asked, "no").unwrap_err();
        assert!(matches!(err, SuggestError::NotJson { .. }), "{err}");
    }

    #[test]
    fn lines_go_at_the_end_of_the_doc_comment_with_the_fn_s_indent() {
        let source = "//! S.\n\n  /// Switch it on.\n  fn power_on() {}\n";
        let on = |line| Suggestion {
            function: "power_on".into(),
            line,
            requests: vec!["telly on".into(), "box on".into()],
        };
        assert_eq!(
            insert(source, &[on(4)]).unwrap(),
            "//! S.\n\n  /// Switch it on.\n  /// @request telly on\n  /// @request box on\n  fn power_on() {}\n"
        );
        // Windows line endings stay.
        assert_eq!(
            insert(&source.replace('\n', "\r\n"), &[on(4)]).unwrap(),
            "//! S.\r\n\r\n  /// Switch it on.\r\n  /// @request telly on\r\n  /// @request box on\r\n  fn power_on() {}\r\n"
        );
        // A file that changed since it was read is not edited blindly.
        for line in [3, 5, 0] {
            let err = insert(source, &[on(line)]).unwrap_err();
            assert!(matches!(err, SuggestError::Moved { .. }), "{err}");
        }
    }
}
