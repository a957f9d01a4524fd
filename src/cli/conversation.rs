//! `ask`, `chat` and `prompt`: the conversation loop at the console.
//!
//! The turn runs on a tokio runtime and streams [`TurnEvent`]s; this side prints them
//! as they come, in order: sentences on stdout, code and its results on stdout
//! marked `|` and `>`, notices and errors on stderr, confirmations asked at the
//! terminal.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use rustyline::error::ReadlineError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{caller_link, load_skills, parts, print_out, runtime, start_mcp};
use crate::agent::{Agent, Session, TurnEvent};
use crate::config::Config;
use crate::mcp::Mcp;
use crate::mqtt::Link;
use crate::skills::policy::{Asking, Confirm, ConsoleConfirm};
use crate::skills::watch::LiveRegistry;

/// The agent over the configured skills and the MCP servers (started on `runtime`),
/// reaching other spokes' skills too when a broker is configured.
fn agent(
    config: &Config,
    runtime: &tokio::runtime::Runtime,
) -> Result<(Agent, Option<Link>, Option<Mcp>)> {
    let parts = parts(config);
    let skills = Arc::new(LiveRegistry::new(Arc::new(load_skills(
        &parts,
        &config.skills.dir,
    ))));
    let mcp = runtime.block_on(start_mcp(&parts, &skills))?;
    let link = caller_link(runtime, &parts)?;
    let agent = parts.agent(skills, link.as_ref(), CancellationToken::new())?;
    Ok((agent, link, mcp))
}

fn disconnect(runtime: &tokio::runtime::Runtime, link: Option<Link>, mcp: Option<Mcp>) {
    if let Some(link) = link {
        runtime.block_on(link.shutdown());
    }
    if let Some(mcp) = mcp {
        runtime.block_on(mcp.shutdown());
    }
}

/// `ask "text"`: one turn; exit 0 when it succeeded, 2 when it failed.
pub fn ask(config: &Config, text: &str) -> Result<ExitCode> {
    let runtime = runtime()?;
    let (agent, link, mcp) = agent(config, &runtime)?;
    let mut session = agent.session();
    let ok = runtime.block_on(turn(&agent, &mut session, text));
    disconnect(&runtime, link, mcp);
    let ok = ok?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// `prompt "text"`: the request body of the first round, as JSON. With a broker it
/// connects first, so the prompt shows the skills of every device online, as a turn
/// in the daemon would.
pub fn prompt(config: &Config, text: &str) -> Result<ExitCode> {
    let runtime = runtime()?;
    let (agent, link, mcp) = agent(config, &runtime)?;
    if link.is_none() {
        eprintln!(
            "note: no MQTT broker configured (mqtt.broker): the prompt shows this device's skills only"
        );
    }
    let mut session = agent.session();
    let body = agent.preview(&mut session, text);
    disconnect(&runtime, link, mcp);
    print_out(&format!("{}\n", serde_json::to_string_pretty(&body)?))?;
    Ok(ExitCode::SUCCESS)
}

/// `chat`: turns over one session until `/quit` or end of input.
pub fn chat(config: &Config) -> Result<ExitCode> {
    let runtime = runtime()?;
    let (agent, link, mcp) = agent(config, &runtime)?;
    let ended = converse(config, &runtime, &agent);
    disconnect(&runtime, link, mcp);
    ended
}

fn converse(config: &Config, runtime: &tokio::runtime::Runtime, agent: &Agent) -> Result<ExitCode> {
    let mut session = agent.session();
    let mut editor = rustyline::DefaultEditor::new().context("cannot open the line editor")?;
    let history = config.device.data_dir.join("chat_history.txt");
    // No history yet is normal.
    let _ = editor.load_history(&history);
    eprintln!("Talking to the model. /clear forgets the conversation, /quit ends.");
    loop {
        let line = match editor.readline("> ") {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e).context("cannot read the line"),
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(line);
        match line {
            "/quit" | "/exit" => break,
            "/clear" => {
                session.clear();
                eprintln!("(conversation forgotten)");
            }
            _ => {
                runtime.block_on(turn(agent, &mut session, line))?;
            }
        }
    }
    if std::fs::create_dir_all(&config.device.data_dir).is_ok()
        && let Err(e) = editor.save_history(&history)
    {
        tracing::warn!("cannot save the chat history to {}: {e}", history.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs one turn and prints its events as they arrive; true when it succeeded.
async fn turn(agent: &Agent, session: &mut Session, text: &str) -> Result<bool> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let run = agent.turn(session, text, &tx);
    tokio::pin!(run);
    let mut result = None;
    loop {
        tokio::select! {
            done = &mut run, if result.is_none() => {
                result = Some(done.is_ok());
            }
            event = rx.recv() => match event {
                Some(event) => show(event)?,
                None => break,
            },
            else => break,
        }
        if result.is_some() && rx.is_empty() {
            break;
        }
    }
    while let Ok(event) = rx.try_recv() {
        show(event)?;
    }
    Ok(result.unwrap_or(false))
}

fn show(event: TurnEvent) -> Result<()> {
    match event {
        TurnEvent::Sentence(sentence) => print_out(&format!("{sentence}\n"))?,
        TurnEvent::Code(code) => {
            let marked: String = code.lines().map(|l| format!("  | {l}\n")).collect();
            print_out(&marked)?;
        }
        TurnEvent::CodeResult { output, result } => {
            let mut text: String = output.lines().map(|l| format!("  > {l}\n")).collect();
            match result {
                Ok(value) if value.is_empty() => {}
                Ok(value) => text.push_str(&format!("  = {value}\n")),
                Err(error) => text.push_str(&format!("  ! {error}\n")),
            }
            print_out(&text)?;
        }
        TurnEvent::Confirm {
            call,
            question,
            reply,
        } => {
            // The turn is waiting for this answer, so blocking on the terminal is fine.
            let answer = ConsoleConfirm.confirm(&Asking { call, question });
            let _ = reply.send(answer);
        }
        TurnEvent::Notice(notice) => eprintln!("note: {notice}"),
        TurnEvent::Error(error) => eprintln!("error: {error}"),
    }
    Ok(())
}
