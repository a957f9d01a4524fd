//! `ha_get`, `ha_post`, `ha_find` and `ha_targets`: Home Assistant's REST API for the
//! bundled `HomeAssistant` skill (`skills/homeassistant.rhai`) and for skills people write.
//!
//! Why a bundled Rhai skill over this small capability rather than a native class: a
//! skill file is already everything the model needs (documented signatures, `@request`
//! lines for search, `@confirm` for unlocking and disarming, `@remote` for other rooms,
//! the call timeout and cancellation), so the Home Assistant functions get all of that
//! without a second mechanism, and a household can copy the file and change what a
//! function does. What a skill must not do is hold the token: here the host attaches it
//! to each request, reads it from `homeassistant.token_file` (or the variable
//! `homeassistant.token_env` names) when it sends, and never returns or logs it, so
//! skill code, error messages and the log never see it. Paths are confined to the
//! configured server's `/api/`, so the token goes nowhere else; redirects are not
//! followed.
//!
//! Finding entities: the model must not get a dump of a home's entities in its prompt,
//! so it asks (`find("kitchen")`) and the functions take names ("kitchen lights").
//! The index behind that (id, friendly name, area, state, device class of every entity)
//! comes from one `/api/template` render (the REST API has no areas otherwise), is
//! kept for `homeassistant.cache_ms`, and is fetched again when a name matches nothing
//! and the index is older than [`MIN_REFRESH`], so a device added a minute ago is found
//! without a restart. A token of a non-admin user may not render templates: then the
//! index comes from `/api/states`, without areas.
//!
//! Every answer is bounded: the body by `homeassistant.max_response_bytes`, the index
//! by `homeassistant.max_entities` (the rest is left out and a warning names the key),
//! names and states by [`MAX_TEXT`], the time by `homeassistant.timeout_ms` and what is
//! left of the skill call or run. Errors say what to do: the URL tried when it is down,
//! where to make a token when it is refused, how to find names when one matches
//! nothing.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rhai::{Array, Dynamic, Engine, Map};
use ureq::Agent;

use super::http::{Outgoing, send};
use super::{HostResult, SkillContext, cut_short_by, human, to_dynamic, to_value};
use crate::deadline;
use crate::text::edit_distance;

/// Characters kept of an entity's id, name, area, state or device class.
pub const MAX_TEXT: usize = 200;
/// Entities `ha_find` and `ha_targets` return at most.
pub const MAX_MATCHES: usize = 20;
/// A name that matches nothing fetches the index again only when it is older than this,
/// so a model guessing names cannot make every call a full fetch.
pub const MIN_REFRESH: Duration = Duration::from_secs(5);
/// Bytes read of a token file; a long-lived token is about 200.
const MAX_TOKEN_BYTES: u64 = 8 * 1024;
/// Characters of Home Assistant's own error text kept in a message.
const MAX_REASON: usize = 300;

/// Where the token comes from; the token itself is read when a request is sent, so it
/// is never part of the settings (which are printed in debug output) and a new token
/// in the file is used without a restart.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenSource {
    /// `homeassistant.token_file`: its first line.
    File(PathBuf),
    /// `homeassistant.token_env`: the variable's value.
    Env(String),
}

/// `[homeassistant]` as the host API needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct HaSettings {
    /// The server, e.g. `http://homeassistant.local:8123`, without a trailing `/`.
    pub url: String,
    /// Where the long-lived access token is.
    pub token: TokenSource,
    /// Timeout of one request.
    pub timeout: Duration,
    /// Largest response body accepted.
    pub max_response_bytes: usize,
    /// Most entities kept in the index.
    pub max_entities: usize,
    /// How long the index is used before it is fetched again.
    pub cache_ttl: Duration,
}

/// What went wrong talking to Home Assistant; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum HaError {
    /// `homeassistant.url` is empty.
    #[error(
        "Home Assistant is not set up on this spoke: set homeassistant.url and homeassistant.token_file in the config (see docs/home-assistant.md)"
    )]
    NotConfigured,
    /// The token could not be read.
    #[error("{0}")]
    Token(String),
    /// A path outside the API.
    #[error("{path:?} is not a Home Assistant API path: it must start with /api/")]
    Path {
        /// The path asked for.
        path: String,
    },
    /// No connection or no answer.
    #[error(
        "cannot reach Home Assistant at {url}: {reason}; is it running, and is homeassistant.url right?"
    )]
    Unreachable {
        /// The URL tried.
        url: String,
        /// What the connection said.
        reason: String,
    },
    /// The request took too long.
    #[error("Home Assistant at {url} did not answer within {after}{why}")]
    Timeout {
        /// The URL tried.
        url: String,
        /// The timeout that passed.
        after: String,
        /// What bounded it, when not homeassistant.timeout_ms.
        why: &'static str,
    },
    /// The run was cancelled or its time is up.
    #[error("Home Assistant request {url}: {why}")]
    Stopped {
        /// The URL tried.
        url: String,
        /// Why the wait ended.
        why: String,
    },
    /// The token was refused.
    #[error(
        "Home Assistant at {url} refused the token ({status}): make a long-lived access token on your Home Assistant profile page ({url}/profile/security, at the bottom) and put it in homeassistant.token_file"
    )]
    Unauthorized {
        /// The server.
        url: String,
        /// 401 or 403.
        status: u16,
    },
    /// Nothing at that path (an unknown entity or service).
    #[error("Home Assistant has nothing at {path} (404){hint}")]
    NotFound {
        /// The path asked for.
        path: String,
        /// What to do instead.
        hint: String,
    },
    /// Any other refusal, with Home Assistant's reason.
    #[error("Home Assistant refused {path} ({status}): {reason}")]
    Refused {
        /// The path asked for.
        path: String,
        /// The HTTP status.
        status: u16,
        /// Its text, cut to [`MAX_REASON`] characters.
        reason: String,
    },
    /// The body was over `homeassistant.max_response_bytes`.
    #[error(
        "Home Assistant's answer to {path} is larger than {max} bytes; raise homeassistant.max_response_bytes in the config if this home needs more"
    )]
    TooLarge {
        /// The path asked for.
        path: String,
        /// The limit.
        max: usize,
    },
    /// The body was not the JSON expected.
    #[error("Home Assistant's answer to {path} is not what was expected: {reason}")]
    Malformed {
        /// The path asked for.
        path: String,
        /// What was wrong.
        reason: String,
    },
    /// A name that matches no entity.
    #[error(
        "no Home Assistant entity{domains} matches {query:?}{suggestions}; call device.HomeAssistant.find(\"{first_word}\") to see the names there are, or pass an entity id such as light.kitchen"
    )]
    NoMatch {
        /// The name asked for.
        query: String,
        /// ` among light, switch`, or empty.
        domains: String,
        /// `; did you mean ...?`, or empty.
        suggestions: String,
        /// The first word of the query, for the example.
        first_word: String,
    },
}

/// One entity in the index.
#[derive(Debug, Clone, PartialEq)]
struct Entity {
    id: String,
    name: String,
    area: String,
    state: String,
    class: String,
    /// Words of the name (or of the id when it has no name).
    name_words: Vec<String>,
    /// Words of the area, the id and the domain.
    other_words: Vec<String>,
}

impl Entity {
    fn new(id: &str, name: &str, area: &str, state: &str, class: &str) -> Entity {
        let (domain, object) = id.split_once('.').unwrap_or(("", id));
        let name = if name.trim().is_empty() {
            object.replace('_', " ")
        } else {
            clip(name)
        };
        let mut other_words = words(area);
        other_words.extend(words(object));
        other_words.extend(words(domain));
        Entity {
            name_words: words(&name),
            id: clip(id),
            name,
            area: clip(area),
            state: clip(state),
            class: clip(class),
            other_words,
        }
    }

    fn domain(&self) -> &str {
        self.id.split_once('.').map_or("", |(d, _)| d)
    }

    fn to_map(&self) -> Map {
        let mut m = Map::new();
        m.insert("entity_id".into(), self.id.clone().into());
        m.insert("name".into(), self.name.clone().into());
        m.insert("area".into(), self.area.clone().into());
        m.insert("domain".into(), self.domain().to_string().into());
        m.insert("state".into(), self.state.clone().into());
        m.insert("device_class".into(), self.class.clone().into());
        m
    }
}

/// The entity index and when it was fetched.
struct Index {
    at: Instant,
    entities: Arc<Vec<Entity>>,
}

/// A Home Assistant server as skills reach it: the settings, one HTTP agent, the index.
struct Client {
    settings: Option<HaSettings>,
    agent: Agent,
    index: Mutex<Option<Index>>,
}

pub(super) fn register(engine: &mut Engine, ctx: &Arc<SkillContext>) {
    let agent: Agent = Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("strawberry-spoke/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let client = Arc::new(Client {
        settings: ctx.settings.homeassistant.clone(),
        agent,
        index: Mutex::new(None),
    });
    let class = ctx.class.clone();
    let fail = move |func: &str, e: HaError| -> Box<rhai::EvalAltResult> {
        tracing::warn!(skill = %class, "{func}: {e}");
        format!("{func}: {e}").into()
    };
    let (c, f) = (client.clone(), fail.clone());
    engine.register_fn("ha_get", move |path: &str| -> HostResult<Dynamic> {
        let value = c.request(path, None).map_err(|e| f("ha_get", e))?;
        to_dynamic("ha_get", &value)
    });
    let (c, f) = (client.clone(), fail.clone());
    engine.register_fn(
        "ha_post",
        move |path: &str, body: Dynamic| -> HostResult<Dynamic> {
            let body = to_value("ha_post", &body)?;
            let value = c.request(path, Some(&body)).map_err(|e| f("ha_post", e))?;
            to_dynamic("ha_post", &value)
        },
    );
    let (c, f) = (client.clone(), fail.clone());
    engine.register_fn(
        "ha_find",
        move |query: &str, domains: Array| -> HostResult<Array> {
            let domains = strings(&domains);
            let found = c.find(query, &domains).map_err(|e| f("ha_find", e))?;
            Ok(found.iter().map(|e| e.to_map().into()).collect())
        },
    );
    engine.register_fn(
        "ha_targets",
        move |target: &str, domains: Array| -> HostResult<Array> {
            let domains = strings(&domains);
            let found = client
                .targets(target, &domains)
                .map_err(|e| fail("ha_targets", e))?;
            Ok(found.iter().map(|e| e.to_map().into()).collect())
        },
    );
}

fn strings(values: &Array) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

impl Client {
    fn settings(&self) -> Result<&HaSettings, HaError> {
        self.settings.as_ref().ok_or(HaError::NotConfigured)
    }

    /// GET (no body) or POST `path` below the server; the answer as JSON (plain text as
    /// a JSON string).
    fn request(
        &self,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value, HaError> {
        let bytes = self.send(path, body)?;
        match serde_json::from_slice(&bytes) {
            Ok(value) => Ok(value),
            Err(_) => Ok(String::from_utf8_lossy(&bytes).into_owned().into()),
        }
    }

    fn send(&self, path: &str, body: Option<&serde_json::Value>) -> Result<Vec<u8>, HaError> {
        let settings = self.settings()?;
        if !path.starts_with("/api/")
            || path.contains("..")
            || path.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(HaError::Path { path: clip(path) });
        }
        let token = read_token(&settings.token)?;
        let url = format!("{}{path}", settings.url);
        let timeout = deadline::bounded(settings.timeout);
        let timed_out = || HaError::Timeout {
            url: url.clone(),
            after: human(timeout),
            why: if timeout < settings.timeout {
                cut_short_by()
            } else {
                " (homeassistant.timeout_ms)"
            },
        };
        if timeout.is_zero() {
            return Err(timed_out());
        }
        let out = Outgoing {
            url: url.clone(),
            headers: vec![("authorization".into(), format!("Bearer {token}"))],
            body: body.map(|b| (b.to_string().into_bytes(), Some("application/json"))),
            timeout,
            max_bytes: settings.max_response_bytes,
        };
        let result = send(&self.agent, out).map_err(|why| HaError::Stopped {
            url: url.clone(),
            why,
        })?;
        let (status, bytes) = result.map_err(|e| match e {
            ureq::Error::Timeout(_) => timed_out(),
            ureq::Error::Io(ref io) if io.kind() == std::io::ErrorKind::TimedOut => timed_out(),
            ureq::Error::BodyExceedsLimit(_) => HaError::TooLarge {
                path: path.to_string(),
                max: settings.max_response_bytes,
            },
            ureq::Error::Io(io) => HaError::Unreachable {
                url: url.clone(),
                reason: io.to_string(),
            },
            other => HaError::Unreachable {
                url: url.clone(),
                reason: other.to_string(),
            },
        })?;
        match status {
            200..=299 => Ok(bytes),
            401 | 403 => Err(HaError::Unauthorized {
                url: settings.url.clone(),
                status,
            }),
            404 => Err(HaError::NotFound {
                path: path.to_string(),
                hint: not_found_hint(path),
            }),
            _ => Err(HaError::Refused {
                path: path.to_string(),
                status,
                reason: reason(&bytes),
            }),
        }
    }

    /// The index, fetched when it is missing, older than the cache time, or (`stale`)
    /// older than [`MIN_REFRESH`].
    fn entities(&self, stale: bool) -> Result<Arc<Vec<Entity>>, HaError> {
        let settings = self.settings()?;
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = index.as_ref() {
            let limit = if stale {
                MIN_REFRESH.min(settings.cache_ttl)
            } else {
                settings.cache_ttl
            };
            if i.at.elapsed() < limit {
                return Ok(i.entities.clone());
            }
        }
        let entities = Arc::new(self.fetch_index(settings)?);
        *index = Some(Index {
            at: Instant::now(),
            entities: entities.clone(),
        });
        Ok(entities)
    }

    fn fetch_index(&self, settings: &HaSettings) -> Result<Vec<Entity>, HaError> {
        // One JSON object per entity, with its area (the REST API has no other way to
        // areas); short keys keep a large home's answer small.
        const TEMPLATE: &str = r#"[{% for s in states %}{{ {"i": s.entity_id, "n": s.name, "a": area_name(s.entity_id) or "", "s": s.state, "c": s.attributes.device_class or ""} | tojson }}{% if not loop.last %},{% endif %}{% endfor %}]"#;
        let body = serde_json::json!({ "template": TEMPLATE });
        let (rows, path) = match self.send("/api/template", Some(&body)) {
            Ok(bytes) => (
                parse_rows("/api/template", &bytes, ["i", "n", "a", "s", "c"])?,
                "/api/template",
            ),
            Err(HaError::Unauthorized { .. }) => {
                // Templates need an admin's token; states without areas do not.
                let bytes = self.send("/api/states", None)?;
                (parse_states(&bytes)?, "/api/states")
            }
            Err(e) => return Err(e),
        };
        if rows.len() > settings.max_entities {
            tracing::warn!(
                "Home Assistant has {} entities; only the first {} are searched (homeassistant.max_entities)",
                rows.len(),
                settings.max_entities
            );
        }
        let entities: Vec<Entity> = rows
            .into_iter()
            .take(settings.max_entities)
            .map(|[id, name, area, state, class]| Entity::new(&id, &name, &area, &state, &class))
            .collect();
        tracing::debug!(
            entities = entities.len(),
            from = path,
            "Home Assistant entity index fetched"
        );
        Ok(entities)
    }

    /// Entities whose name, area or id match `query` (all when it is empty), in
    /// `domains` (all when empty), best first, at most [`MAX_MATCHES`].
    fn find(&self, query: &str, domains: &[String]) -> Result<Vec<Entity>, HaError> {
        let mut found = ranked(&self.entities(false)?, query, domains, false);
        if found.is_empty() && !query.trim().is_empty() {
            found = ranked(&self.entities(true)?, query, domains, false);
        }
        found.truncate(MAX_MATCHES);
        Ok(found)
    }

    /// What `target` names: an entity id, or the entities that match it best (several
    /// when they tie: "kitchen lights" may be three lights in the kitchen). Nothing is an
    /// error saying how to find names.
    fn targets(&self, target: &str, domains: &[String]) -> Result<Vec<Entity>, HaError> {
        let target = target.trim();
        let look = |entities: &[Entity]| -> Vec<Entity> {
            if let Some(e) = entities.iter().find(|e| e.id == target) {
                return vec![e.clone()];
            }
            ranked(entities, target, domains, true)
        };
        let mut found = look(&self.entities(false)?);
        if found.is_empty() {
            let entities = self.entities(true)?;
            found = look(&entities);
            if found.is_empty() {
                return Err(no_match(&entities, target, domains));
            }
        }
        found.truncate(MAX_MATCHES);
        Ok(found)
    }
}

/// What to do after a 404, by the kind of path.
fn not_found_hint(path: &str) -> String {
    if let Some(id) = path.strip_prefix("/api/states/") {
        format!(
            "; there is no entity {id:?}: call device.HomeAssistant.find(\"\") to see the names there are"
        )
    } else if path.starts_with("/api/services/") {
        "; that service does not exist in this Home Assistant (is its integration set up?)".into()
    } else {
        String::new()
    }
}

/// Home Assistant's error text: a JSON `message`, else the body, cut to [`MAX_REASON`].
fn reason(bytes: &[u8]) -> String {
    let text = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(v) => v
            .get("message")
            .and_then(|m| m.as_str())
            .map_or_else(|| v.to_string(), str::to_string),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    };
    let text: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_REASON)
        .collect();
    if text.trim().is_empty() {
        "no reason given".into()
    } else {
        text
    }
}

fn read_token(source: &TokenSource) -> Result<String, HaError> {
    use std::io::Read;
    let token = match source {
        TokenSource::File(path) => {
            let mut bytes = Vec::new();
            std::fs::File::open(path)
                .and_then(|f| f.take(MAX_TOKEN_BYTES).read_to_end(&mut bytes))
                .map_err(|e| {
                    HaError::Token(format!(
                        "cannot read the Home Assistant token file {} (homeassistant.token_file): {e}",
                        path.display()
                    ))
                })?;
            String::from_utf8_lossy(&bytes)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        }
        TokenSource::Env(var) => std::env::var(var).unwrap_or_default().trim().to_string(),
    };
    let place = match source {
        TokenSource::File(path) => {
            format!("the file {} (homeassistant.token_file)", path.display())
        }
        TokenSource::Env(var) => {
            format!("the environment variable {var} (homeassistant.token_env)")
        }
    };
    if token.is_empty() {
        return Err(HaError::Token(format!(
            "no Home Assistant token in {place}: make a long-lived access token on your Home Assistant profile page (/profile/security, at the bottom) and put it there"
        )));
    }
    if !token.chars().all(|c| c.is_ascii_graphic()) {
        return Err(HaError::Token(format!(
            "the Home Assistant token in {place} has characters a token never has: paste the token alone"
        )));
    }
    Ok(token)
}

/// The rows of the index template: each object's values at `keys`, as strings.
fn parse_rows(path: &str, bytes: &[u8], keys: [&str; 5]) -> Result<Vec<[String; 5]>, HaError> {
    let malformed = |reason: String| HaError::Malformed {
        path: path.to_string(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| malformed(format!("not JSON ({e})")))?;
    let rows = value
        .as_array()
        .ok_or_else(|| malformed("not a list".into()))?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            let text = |key: &str| match row.get(key) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            let id = text(keys[0]);
            (!id.is_empty()).then(|| {
                [
                    id,
                    text(keys[1]),
                    text(keys[2]),
                    text(keys[3]),
                    text(keys[4]),
                ]
            })
        })
        .collect())
}

/// `/api/states` rows as the index's: no areas.
fn parse_states(bytes: &[u8]) -> Result<Vec<[String; 5]>, HaError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| HaError::Malformed {
            path: "/api/states".into(),
            reason: format!("not JSON ({e})"),
        })?;
    let Some(states) = value.as_array() else {
        return Err(HaError::Malformed {
            path: "/api/states".into(),
            reason: "not a list".into(),
        });
    };
    let attr =
        |s: &serde_json::Value, key: &str| s["attributes"][key].as_str().unwrap_or("").to_string();
    Ok(states
        .iter()
        .filter_map(|s| {
            let id = s["entity_id"].as_str()?.to_string();
            Some([
                id,
                attr(s, "friendly_name"),
                String::new(),
                s["state"].as_str().unwrap_or("").to_string(),
                attr(s, "device_class"),
            ])
        })
        .collect())
}

/// At most [`MAX_TEXT`] characters, control characters dropped.
fn clip(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(MAX_TEXT)
        .collect()
}

/// Words that say nothing about which entity is meant.
const FILLER: [&str; 10] = [
    "the", "a", "an", "my", "our", "in", "on", "of", "all", "please",
];

/// Lowercase words, `_` and punctuation as spaces, filler dropped, a plural `s` cut
/// ("lights" finds "Kitchen Light").
fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && !FILLER.contains(w))
        .map(|w| {
            if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") {
                w[..w.len() - 1].to_string()
            } else {
                w.to_string()
            }
        })
        .collect()
}

/// How well one query word fits one entity word: 2 exact, 1 a likely mishearing (one
/// edit in a word of five letters or more), 0 not at all.
fn fit(query: &str, word: &str) -> u32 {
    if query == word {
        2
    } else if query.len() >= 5 && edit_distance(query, word) <= 1 {
        1
    } else {
        0
    }
}

/// Scores `entity` for the query words: `None` unless every word fits the name, the
/// area, the id or the domain; higher is better (words in the name count more, and a
/// name that is exactly the query most).
fn score(entity: &Entity, query: &[String]) -> Option<u32> {
    let mut total = 0;
    for q in query {
        let in_name = entity
            .name_words
            .iter()
            .map(|w| fit(q, w))
            .max()
            .unwrap_or(0);
        let elsewhere = entity
            .other_words
            .iter()
            .map(|w| fit(q, w))
            .max()
            .unwrap_or(0);
        total += match (in_name, elsewhere) {
            (0, 0) => return None,
            (n, o) if n >= o => 2 * n,
            (_, o) => o,
        };
    }
    if entity.name_words == query {
        total += 10;
    }
    Some(total)
}

/// Entities matching `query` in `domains`, best first; `tied_only` keeps just those
/// with the best score.
fn ranked(entities: &[Entity], query: &str, domains: &[String], tied_only: bool) -> Vec<Entity> {
    let query = words(query);
    let mut scored: Vec<(u32, &Entity)> = entities
        .iter()
        .filter(|e| domains.is_empty() || domains.iter().any(|d| d == e.domain()))
        .filter_map(|e| score(e, &query).map(|s| (s, e)))
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    if tied_only && let Some(&(best, _)) = scored.first() {
        scored.retain(|(s, _)| *s == best);
    }
    scored.into_iter().map(|(_, e)| e.clone()).collect()
}

/// The error for a name that matches nothing: the names that share most of its words.
fn no_match(entities: &[Entity], target: &str, domains: &[String]) -> HaError {
    let query = words(target);
    let mut close: Vec<(usize, &Entity)> = entities
        .iter()
        .filter(|e| domains.is_empty() || domains.iter().any(|d| d == e.domain()))
        .map(|e| {
            let shared = query
                .iter()
                .filter(|q| {
                    e.name_words
                        .iter()
                        .chain(&e.other_words)
                        .any(|w| fit(q, w) > 0)
                })
                .count();
            (shared, e)
        })
        .filter(|(shared, _)| *shared > 0)
        .collect();
    close.sort_by_key(|c| std::cmp::Reverse(c.0));
    let names: Vec<String> = close
        .iter()
        .take(3)
        .map(|(_, e)| format!("\"{}\" ({})", e.name, e.id))
        .collect();
    HaError::NoMatch {
        query: clip(target),
        // A long list (everything that turns on) says less than none.
        domains: if domains.is_empty() || domains.len() > 3 {
            String::new()
        } else {
            format!(" among {}", domains.join(", "))
        },
        suggestions: if names.is_empty() {
            String::new()
        } else {
            format!("; did you mean {}?", names.join(" or "))
        },
        first_word: query.first().cloned().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> Vec<Entity> {
        vec![
            Entity::new(
                "light.kitchen_lights",
                "Kitchen Lights",
                "Kitchen",
                "off",
                "",
            ),
            Entity::new(
                "light.ceiling_lights",
                "Ceiling Lights",
                "Living Room",
                "on",
                "",
            ),
            Entity::new("light.bed_light", "Bed Light", "Bedroom", "off", ""),
            Entity::new(
                "switch.decorative_lights",
                "Decorative Lights",
                "",
                "on",
                "switch",
            ),
            Entity::new("lock.front_door", "Front Door", "Hall", "locked", ""),
            Entity::new("cover.garage_door", "Garage Door", "", "closed", "garage"),
        ]
    }

    fn ids(found: &[Entity]) -> Vec<&str> {
        found.iter().map(|e| e.id.as_str()).collect()
    }

    #[test]
    fn names_plurals_areas_and_mishearings_find_the_entity() {
        let home = home();
        let light = ["light".to_string()];
        assert_eq!(
            ids(&ranked(&home, "the kitchen lights", &light, true)),
            ["light.kitchen_lights"]
        );
        assert_eq!(
            ids(&ranked(&home, "kitchen light", &[], true)),
            ["light.kitchen_lights"]
        );
        assert_eq!(
            ids(&ranked(&home, "living room", &light, true)),
            ["light.ceiling_lights"]
        );
        assert_eq!(
            ids(&ranked(&home, "bedroom", &light, true)),
            ["light.bed_light"]
        );
        assert_eq!(
            ids(&ranked(&home, "kitchen lihgts", &light, true)),
            ["light.kitchen_lights"]
        );
        assert!(ranked(&home, "garden", &[], true).is_empty());
        // The domain filter: the decorative lights are a switch.
        assert!(ranked(&home, "decorative lights", &light, true).is_empty());
        assert_eq!(ranked(&home, "", &light, false).len(), 3);
    }

    #[test]
    fn no_match_names_close_entities_and_how_to_list_names() {
        let err = no_match(&home(), "front window", &[]).to_string();
        assert!(err.contains("\"Front Door\" (lock.front_door)"), "{err}");
        assert!(
            err.contains("device.HomeAssistant.find(\"front\")"),
            "{err}"
        );
    }

    #[test]
    fn index_rows_are_bounded_and_cleaned() {
        let long = "x".repeat(5_000);
        let body = serde_json::json!([
            {"i": "light.a", "n": format!("Lamp\u{1b}[31m{long}"), "a": null, "s": "on", "c": ""},
            {"i": "", "n": "no id"},
        ]);
        let rows = parse_rows(
            "/api/template",
            body.to_string().as_bytes(),
            ["i", "n", "a", "s", "c"],
        )
        .unwrap();
        assert_eq!(rows.len(), 1);
        let e = Entity::new(
            &rows[0][0],
            &rows[0][1],
            &rows[0][2],
            &rows[0][3],
            &rows[0][4],
        );
        assert_eq!(e.name.chars().count(), MAX_TEXT);
        assert!(!e.name.contains('\u{1b}'));
        assert_eq!(e.area, "");
    }

    #[test]
    fn error_text_is_cut_and_stripped() {
        let long = format!("{{\"message\": \"bad\\u001b{}\"}}", "y".repeat(2_000));
        let r = reason(long.as_bytes());
        assert!(r.starts_with("bad") && !r.contains('\u{1b}'));
        assert_eq!(r.chars().count(), MAX_REASON);
        assert_eq!(reason(b""), "no reason given");
    }
}
