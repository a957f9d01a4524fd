//! `skills suggest`: asks the hub's model for `@request` lines for the functions that
//! have none, one question per skill class, and prints them or writes them into the
//! files (see [`draft`] for why they are drafted rather than generated
//! at run time).

mod draft;

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use super::{print_out, report_load_errors, runtime};
use crate::app::Parts;
use crate::config::Config;
use crate::hub::{ChatMessage, HubClient};
use crate::skills::{SkillClass, SkillFunction};
use draft::{PER_QUESTION, Suggestion};

/// Asks for every class with functions lacking `@request` lines, [`PER_QUESTION`]
/// functions a question; `write` puts them into the files (each file checked to still
/// load, or left as it was). Exit 2 when an answer was unusable or a file not written.
pub fn suggest(parts: &Parts, dir: &Path, write: bool) -> Result<ExitCode> {
    let config = parts.config();
    let (registry, errors) = parts.skills_in(dir);
    report_load_errors(&errors);
    let asking: Vec<&SkillClass> = registry
        .classes()
        .iter()
        .filter(|c| !draft::wanting(c).is_empty())
        .collect();
    if registry.classes().is_empty() {
        eprintln!("{}: no skill loaded; nothing to ask", dir.display());
        return Ok(ExitCode::from(2));
    }
    if asking.is_empty() {
        print_out(&format!(
            "{}: every function the model may call has `@request` lines; nothing to ask\n",
            dir.display()
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let hub = parts.hub()?;
    let rt = runtime()?;
    let mut failed = false;
    for class in asking {
        let mut suggestions = Vec::new();
        for functions in draft::wanting(class).chunks(PER_QUESTION) {
            match ask(&rt, &hub, config, class, functions) {
                Ok(mut more) => suggestions.append(&mut more),
                Err(error) => {
                    eprintln!("{}: {error:#}", class.file.display());
                    failed = true;
                }
            }
        }
        if suggestions.is_empty() {
            continue;
        }
        if write {
            if let Err(error) = write_into(class, &suggestions, parts) {
                eprintln!("{}: {error:#}", class.file.display());
                failed = true;
            }
        } else {
            let mut out = String::new();
            for s in &suggestions {
                out.push_str(&format!(
                    "{}:{}: {}.{}\n",
                    class.file.display(),
                    s.line,
                    class.name,
                    s.function
                ));
                for request in &s.requests {
                    out.push_str(&format!("/// @request {request}\n"));
                }
            }
            print_out(&out)?;
        }
    }
    if !write {
        eprintln!(
            "Keep the ones that sound like your household and put them at the end of each function's doc comment, or run again with --write to add them all."
        );
    }
    Ok(if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// One question to the hub about `functions` of `class`, and what its answer gives.
fn ask(
    rt: &tokio::runtime::Runtime,
    hub: &HubClient,
    config: &Config,
    class: &SkillClass,
    functions: &[&SkillFunction],
) -> Result<Vec<Suggestion>> {
    let (system, user) = draft::question(class, functions);
    let messages = [
        ChatMessage::new("system", system),
        ChatMessage::new("user", user),
    ];
    let answer = rt.block_on(async {
        let mut stream = hub.stream(&messages, None).await?;
        let mut answer = String::new();
        // The hub client bounds the reply (hub.max_reply_bytes), as for a turn.
        while let Some(piece) = stream.next().await? {
            answer.push_str(&piece);
        }
        if stream.finish_reason() == Some("length") {
            bail!(
                "the hub's answer was cut at hub.max_tokens ({}); raise it",
                config.hub.max_tokens
            );
        }
        Ok(answer)
    })?;
    Ok(draft::read_answer(class, functions, &answer)?)
}

/// Adds the lines to the class's file; if the file no longer loads (it should), puts
/// the old text back and says why.
fn write_into(class: &SkillClass, suggestions: &[Suggestion], parts: &Parts) -> Result<()> {
    let path = &class.file;
    let old =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    std::fs::write(path, draft::insert(&old, suggestions)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    if let Err(error) = parts.skill_file(path) {
        std::fs::write(path, &old).with_context(|| format!("cannot restore {}", path.display()))?;
        bail!("{error}: the suggested lines broke it, so it was left as it was");
    }
    let added: usize = suggestions.iter().map(|s| s.requests.len()).sum();
    print_out(&format!(
        "{}: {added} `@request` lines added to {} function(s)\n",
        path.display(),
        suggestions.len()
    ))
}
