//! The MCP servers file: the `mcpServers` object other MCP clients write (Claude
//! Desktop, Cursor, Strawberry's `mcp_config.json`), so a server's README example is
//! pasted as it is, plus this spoke's own options under the key [`OPTIONS_KEY`].
//!
//! The file is ours to read but may be edited by hand or by other tools, so it is
//! bounded ([`MAX_FILE_BYTES`], [`MAX_SERVERS`]) and every mistake names the server and
//! the key. Keys other clients use that mean nothing here (`disabled`, `autoApprove`,
//! ...) are accepted: refusing them would refuse files pasted from elsewhere.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::McpError;

/// Largest servers file read: a file of a few servers is a few kilobytes.
pub const MAX_FILE_BYTES: u64 = 256 * 1024;
/// Most servers one file may name: each is a process or a connection, and a class in
/// every prompt's list of classes.
pub const MAX_SERVERS: usize = 16;
/// The top-level key of this spoke's per-server options in the servers file.
pub const OPTIONS_KEY: &str = "strawberry";

/// How to reach one server.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A child process speaking MCP on its standard input and output.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its (otherwise nearly empty) environment.
        env: BTreeMap<String, String>,
        /// Its working directory, if given.
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:3001/mcp`.
        url: String,
        /// Headers sent with every request (e.g. `Authorization`).
        headers: BTreeMap<String, String>,
    },
}

/// Which tools an option applies to: all of them, or those named.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Tools {
    /// `true`: every tool; `false`: none.
    All(bool),
    /// The tools named (as the server names them, or as the function is called here).
    Named(Vec<String>),
}

impl Default for Tools {
    fn default() -> Self {
        Tools::All(false)
    }
}

impl Tools {
    /// Whether the tool called `tool` (function `function` here) is covered.
    pub fn covers(&self, tool: &str, function: &str) -> bool {
        match self {
            Tools::All(all) => *all,
            Tools::Named(names) => names.iter().any(|n| n == tool || n == function),
        }
    }
}

/// This spoke's options for one server (`"strawberry": {"KEY": {...}}`).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// Tools that ask the person before they run, like a skill function's `@confirm`.
    #[serde(default)]
    pub confirm: Tools,
    /// Tools other spokes may call (like `@remote`); none unless named.
    #[serde(default)]
    pub remote: Tools,
    /// A call's own timeout, replacing `skills.call_timeout_ms` for this server.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// One configured server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    /// Its key in `mcpServers`.
    pub key: String,
    /// The skill class its tools become.
    pub class: String,
    /// How to reach it.
    pub transport: Transport,
    /// Our options.
    pub options: Options,
}

impl ServerSpec {
    /// The call timeout of this server, or `default`.
    pub fn timeout(&self, default: Duration) -> Duration {
        self.options
            .timeout_ms
            .map_or(default, Duration::from_millis)
    }
}

/// One `mcpServers` entry as other clients write it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    disabled: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FileDoc {
    #[serde(default)]
    mcp_servers: BTreeMap<String, Entry>,
    #[serde(default, rename = "strawberry")]
    options: BTreeMap<String, Options>,
}

/// Reads and checks the servers file at `path`; servers marked `"disabled": true` are
/// left out.
pub fn read(path: &Path) -> Result<Vec<ServerSpec>, McpError> {
    let bad = |message: String| McpError::File {
        file: path.to_path_buf(),
        message,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(bad(format!(
            "it is {} bytes, over the limit of {MAX_FILE_BYTES}; an MCP servers file names servers, it holds no data",
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    parse(&text).map_err(bad)
}

/// Parses the text of a servers file.
pub fn parse(text: &str) -> Result<Vec<ServerSpec>, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let doc: FileDoc = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        format!(
            "not a valid MCP servers file at `{}`: {}",
            e.path(),
            e.inner()
        )
    })?;
    if doc.mcp_servers.len() > MAX_SERVERS {
        return Err(format!(
            "it names {} servers in `mcpServers`, over the limit of {MAX_SERVERS}; remove or disable some (\"disabled\": true)",
            doc.mcp_servers.len()
        ));
    }
    if let Some(stray) = doc
        .options
        .keys()
        .find(|k| !doc.mcp_servers.contains_key(*k))
    {
        return Err(format!(
            "`{OPTIONS_KEY}.{stray}` gives options for a server that `mcpServers` does not name; use the same key in both"
        ));
    }
    let mut classes: HashMap<String, String> = HashMap::new();
    let mut specs = Vec::new();
    for (key, entry) in doc.mcp_servers {
        if entry.disabled {
            continue;
        }
        let transport = transport(&key, entry)?;
        let class = class_name(&key).ok_or_else(|| {
            format!("the server key `{key}` has no letters or digits to name its skill class by; rename it")
        })?;
        if let Some(other) = classes.insert(class.clone(), key.clone()) {
            return Err(format!(
                "the servers `{other}` and `{key}` would both be the skill class `{class}`; rename one of them"
            ));
        }
        let options = doc.options.get(&key).cloned().unwrap_or_default();
        if options.timeout_ms == Some(0) {
            return Err(format!(
                "`{OPTIONS_KEY}.{key}.timeout_ms` must be greater than 0"
            ));
        }
        specs.push(ServerSpec {
            key,
            class,
            transport,
            options,
        });
    }
    Ok(specs)
}

fn transport(key: &str, entry: Entry) -> Result<Transport, String> {
    if let Some(kind) = entry.kind.as_deref()
        && kind.eq_ignore_ascii_case("sse")
    {
        return Err(format!(
            "server `{key}` uses the legacy SSE transport, which this spoke does not speak; give its Streamable HTTP endpoint (often the same server at `/mcp`) with \"url\""
        ));
    }
    match (entry.command, entry.url) {
        (Some(command), None) if !command.trim().is_empty() => Ok(Transport::Stdio {
            command,
            args: entry.args,
            env: entry.env,
            cwd: entry.cwd,
        }),
        (None, Some(url)) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!(
                    "server `{key}`: \"url\" must start with http:// or https://, got {url:?}"
                ));
            }
            Ok(Transport::Http {
                url,
                headers: entry.headers,
            })
        }
        (Some(_), Some(_)) => Err(format!(
            "server `{key}` has both \"command\" and \"url\"; give \"command\" (with \"args\") for a program to start, or \"url\" for a server already running"
        )),
        _ => Err(format!(
            "server `{key}` has neither \"command\" nor \"url\"; give \"command\" (with \"args\") for a program to start, or \"url\" for a server already running"
        )),
    }
}

/// The skill class a server key becomes: its words in CamelCase (`home-assistant` is
/// `HomeAssistant`, `time` is `Time`), `Mcp` in front when it would start with a digit.
pub fn class_name(key: &str) -> Option<String> {
    let mut name = String::new();
    for word in key.split(|c: char| !c.is_ascii_alphanumeric()) {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            name.push(first.to_ascii_uppercase());
            name.extend(chars);
        }
    }
    if name.is_empty() {
        return None;
    }
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert_str(0, "Mcp");
    }
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_readme_example_is_read_as_pasted() {
        let specs = parse(
            r#"{
              "mcpServers": {
                "time": {"command": "uvx", "args": ["mcp-server-time", "--local-timezone=Europe/London"]},
                "home-assistant": {"url": "http://127.0.0.1:8123/api/mcp", "headers": {"Authorization": "Bearer x"}, "type": "http"},
                "off": {"command": "x", "disabled": true, "autoApprove": []}
              },
              "strawberry": {"time": {"confirm": ["convert_time"], "remote": true, "timeout_ms": 500}}
            }"#,
        )
        .unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].class, "HomeAssistant");
        assert!(
            matches!(&specs[0].transport, Transport::Http { headers, .. } if headers.len() == 1)
        );
        assert_eq!(specs[1].class, "Time");
        assert!(
            specs[1]
                .options
                .confirm
                .covers("convert_time", "convert_time")
        );
        assert!(
            !specs[1]
                .options
                .confirm
                .covers("get_current_time", "get_current_time")
        );
        assert!(specs[1].options.remote.covers("anything", "anything"));
        assert_eq!(
            specs[1].timeout(Duration::from_secs(9)),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn mistakes_name_the_server_and_the_fix() {
        let cases = [
            (r#"{"mcpServers": {"a": {}}}"#, "neither"),
            (r#"{"mcpServers": {"a": {"url": "ftp://x"}}}"#, "http://"),
            (
                r#"{"mcpServers": {"a": {"url": "http://x", "type": "sse"}}}"#,
                "legacy SSE",
            ),
            (
                r#"{"mcpServers": {"my-time": {"command": "a"}, "my_time": {"command": "b"}}}"#,
                "`MyTime`",
            ),
            (
                r#"{"mcpServers": {}, "strawberry": {"a": {}}}"#,
                "`strawberry.a`",
            ),
            (
                r#"{"mcpServers": {"a": {"command": "a"}}, "strawberry": {"a": {"confrim": true}}}"#,
                "confrim",
            ),
        ];
        for (text, wanted) in cases {
            let error = parse(text).unwrap_err();
            assert!(error.contains(wanted), "{text}: {error}");
        }
        let many: Vec<String> = (0..=MAX_SERVERS)
            .map(|i| format!("\"s{i}\": {{\"command\": \"x\"}}"))
            .collect();
        let error = parse(&format!("{{\"mcpServers\": {{{}}}}}", many.join(","))).unwrap_err();
        assert!(error.contains("over the limit"), "{error}");
    }

    #[test]
    fn class_names_are_camel_case_identifiers() {
        assert_eq!(class_name("time").as_deref(), Some("Time"));
        assert_eq!(
            class_name("server-everything").as_deref(),
            Some("ServerEverything")
        );
        assert_eq!(class_name("2fa").as_deref(), Some("Mcp2fa"));
        assert_eq!(class_name("--"), None);
    }
}
