//! `http_get` and `http_post`: small HTTP requests to local or nearby APIs.
//!
//! Non-2xx answers are results, not errors (the skill decides what a 404 means); errors
//! are what prevented an answer: a bad URL, no connection, a timeout, a body over
//! `settings.http_max_bytes`.
//!
//! ureq blocks and cannot be interrupted, so the request runs on a thread of its own
//! while the skill's thread waits in slices: a cancelled run stops waiting at once, and
//! the abandoned request ends by its own timeout.

use std::io;
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

use rhai::{Dynamic, Engine, Map};
use ureq::Agent;

use super::{
    HostResult, SkillContext, check_options, human, stopped_early, timeout_option, to_dynamic,
    to_value,
};
use crate::deadline;

pub(super) fn register(engine: &mut Engine, ctx: &Arc<SkillContext>) {
    let agent: Agent = Agent::config_builder()
        .http_status_as_error(false)
        .user_agent(concat!("strawberry-spoke/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let limits = Limits {
        timeout: ctx.settings.http_timeout,
        max_bytes: ctx.settings.http_max_bytes,
    };
    let a = agent.clone();
    engine.register_fn("http_get", move |url: &str| -> HostResult<Map> {
        request(&a, limits, "http_get", url, None, &Map::new())
    });
    let a = agent.clone();
    engine.register_fn("http_get", move |url: &str, opts: Map| -> HostResult<Map> {
        request(&a, limits, "http_get", url, None, &opts)
    });
    let a = agent.clone();
    engine.register_fn(
        "http_post",
        move |url: &str, body: Dynamic| -> HostResult<Map> {
            request(&a, limits, "http_post", url, Some(body), &Map::new())
        },
    );
    engine.register_fn(
        "http_post",
        move |url: &str, body: Dynamic, opts: Map| -> HostResult<Map> {
            request(&agent, limits, "http_post", url, Some(body), &opts)
        },
    );
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    timeout: Duration,
    max_bytes: usize,
}

/// A request body as bytes plus the content type it implies.
fn encode_body(func: &str, body: Dynamic) -> HostResult<(Vec<u8>, Option<&'static str>)> {
    if body.is_unit() {
        return Ok((Vec::new(), None));
    }
    if body.is_string() {
        return Ok((
            body.to_string().into_bytes(),
            Some("text/plain; charset=utf-8"),
        ));
    }
    if body.is_blob() {
        let bytes = body.cast::<rhai::Blob>();
        return Ok((bytes, Some("application/octet-stream")));
    }
    let json = to_value(func, &body)?;
    Ok((json.to_string().into_bytes(), Some("application/json")))
}

fn request(
    agent: &Agent,
    limits: Limits,
    func: &str,
    url: &str,
    body: Option<Dynamic>,
    opts: &Map,
) -> HostResult<Map> {
    check_options(func, opts, &["headers", "timeout_ms"])?;
    let wanted = timeout_option(func, opts)?.unwrap_or(limits.timeout);
    let timeout = deadline::bounded(wanted);
    let cut_by = (timeout < wanted).then(super::cut_short_by);
    let timed_out = || -> Box<rhai::EvalAltResult> {
        let why = cut_by.unwrap_or("");
        format!("{func} {url}: timed out after {}{why}", human(timeout)).into()
    };
    if timeout.is_zero() {
        return Err(timed_out());
    }
    let mut headers: Vec<(String, String)> = Vec::new();
    if let Some(h) = opts.get("headers") {
        let Some(map) = h.read_lock::<Map>() else {
            return Err(format!("{func}: option headers must be a map of strings, got {h}").into());
        };
        for (name, value) in map.iter() {
            headers.push((name.to_string(), value.to_string()));
        }
    }
    let body = match body {
        None => None,
        Some(body) => Some(encode_body(func, body)?),
    };
    let result = send(
        agent,
        Outgoing {
            url: url.to_string(),
            headers,
            body,
            timeout,
            max_bytes: limits.max_bytes,
        },
    )
    .map_err(|why| format!("{func} {url}: {why}"))?;
    let fail = |e: ureq::Error| -> Box<rhai::EvalAltResult> {
        match e {
            ureq::Error::Timeout(_) => timed_out(),
            ureq::Error::Io(ref io) if io.kind() == io::ErrorKind::TimedOut => timed_out(),
            ureq::Error::BodyExceedsLimit(n) => {
                format!("{func} {url}: response larger than {n} bytes (settings.http_max_bytes)")
                    .into()
            }
            other => format!("{func} {url}: {other}").into(),
        }
    };
    let (status, bytes) = result.map_err(fail)?;
    let status = i64::from(status);
    let json = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(v) => to_dynamic(func, &v)?,
        Err(_) => Dynamic::UNIT,
    };
    let mut m = Map::new();
    m.insert("status".into(), status.into());
    m.insert(
        "body".into(),
        String::from_utf8_lossy(&bytes).into_owned().into(),
    );
    m.insert("json".into(), json);
    Ok(m)
}

/// One request for [`send`]: a GET without a body, else a POST.
pub(super) struct Outgoing {
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// The body and the content type it implies (unless `headers` names one).
    pub body: Option<(Vec<u8>, Option<&'static str>)>,
    pub timeout: Duration,
    pub max_bytes: usize,
}

/// Sends a request on a thread of its own and waits in slices of [`deadline::SLICE`], so
/// a cancelled run stops waiting at once (the abandoned request ends by its own
/// timeout). The outer error says why the wait stopped; the inner result is ureq's:
/// the status and the body, at most `max_bytes`.
pub(super) fn send(
    agent: &Agent,
    out: Outgoing,
) -> Result<Result<(u16, Vec<u8>), ureq::Error>, String> {
    let agent = agent.clone();
    let (done, answer) = mpsc::sync_channel(1);
    thread::Builder::new()
        .name("skill-http".into())
        .spawn(move || {
            let Outgoing {
                url,
                headers,
                body,
                timeout,
                max_bytes,
            } = out;
            let result = match body {
                None => {
                    let mut req = agent.get(&url);
                    for (n, v) in &headers {
                        req = req.header(n.as_str(), v.as_str());
                    }
                    req.config().timeout_global(Some(timeout)).build().call()
                }
                Some((bytes, content_type)) => {
                    let mut req = agent.post(&url);
                    for (n, v) in &headers {
                        req = req.header(n.as_str(), v.as_str());
                    }
                    let has_content_type = headers
                        .iter()
                        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
                    if let (Some(ct), false) = (content_type, has_content_type) {
                        req = req.header("content-type", ct);
                    }
                    req.config()
                        .timeout_global(Some(timeout))
                        .build()
                        .send(&bytes[..])
                }
            };
            let read = result.and_then(|response| {
                let status = response.status().as_u16();
                let bytes = response
                    .into_body()
                    .with_config()
                    .limit(max_bytes as u64)
                    .read_to_vec()?;
                Ok((status, bytes))
            });
            // The caller may have stopped waiting (its run was cancelled).
            let _ = done.send(read);
        })
        .map_err(|e| format!("cannot start the request: {e}"))?;
    loop {
        match answer.recv_timeout(deadline::SLICE) {
            Ok(result) => return Ok(result),
            Err(mpsc::RecvTimeoutError::Timeout) if deadline::cancelled() => {
                return Err(stopped_early().to_string());
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err("the request stopped unexpectedly".to_string());
            }
        }
    }
}
