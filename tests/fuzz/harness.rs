//! The bodies of the fuzz targets (issue 14), as plain functions of the input bytes.
//!
//! Shared by the libFuzzer binaries (`tests/fuzz/targets/`, through the fuzz crate)
//! and by `tests/fuzz_replay.rs`, which runs every corpus file through them in the
//! normal test suite, uninstrumented. Each target uses the crate's public API the way
//! the daemon does and returns normally whatever the code under test makes of the
//! input; a finding is a panic (a failed check below included), a hang, or an
//! allocation over the fuzzer's limit.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use strawberry_spoke::audio::resample::{Resampler, resample};
use strawberry_spoke::audio::wav::read_wav;
use strawberry_spoke::config::Config;
use strawberry_spoke::hub::sse::{SseEvent, SseParser};
use strawberry_spoke::hub::{ChatMessage, HubClient};
use strawberry_spoke::mqtt::peers::Peers;
use strawberry_spoke::mqtt::protocol::{CallRequest, CallResponse};
use strawberry_spoke::skills::{HostSettings, Registry};

/// The device id registrations are published for in [`mqtt_payload`].
const PEER_ID: &str = "fuzzed";

/// The reply size limit of [`sse`]'s hub client (small, so inputs can reach it).
const MAX_REPLY_BYTES: usize = 1024;

/// Most 16 kHz samples [`wav`] asks of the resampler (64 MiB of output). The
/// resampler allocates `input * 16000 / rate`, so a 1 Hz header makes a small file
/// ask for gigabytes: issue 14's 1 Hz WAV finding, which a header check in the WAV
/// reader fixes. Until then, inputs over this are not resampled, so the campaign
/// looks for other problems.
const MAX_RESAMPLED: u64 = 16 << 20;

/// How far streamed and one-go resampling may differ: where a piece ends decides
/// whether an output sample comes from the tap table or the edge formula, which round
/// differently (by ~1e-7); anything near audible is a bug.
const RESAMPLE_TOLERANCE: f32 = 1e-4;

/// A directory for the files the targets write, one per process.
fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory for the fuzz inputs"))
        .path()
}

/// Writes `data` to the scratch file `name` (each target has its own).
fn scratch_file(name: &str, data: &[u8]) -> PathBuf {
    let path = scratch().join(name);
    std::fs::write(&path, data).expect("the scratch directory is writable");
    path
}

/// The SSE parser and the assembly of a streamed reply.
///
/// Byte 0 chooses how the rest, the body a server sends, is cut into chunks and
/// whether it is sent as `text/event-stream` or as a plain JSON body. The parser must
/// yield the same events however the bytes are chunked; the reply is then streamed
/// from a local HTTP server through [`HubClient`], as in a conversation.
pub fn sse(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(mode & 0x3f) + 1;
    let event_stream = mode & 0x80 == 0;

    let whole = parse_sse([body]);
    let chunked = parse_sse(body.chunks(chunk));
    assert_eq!(whole, chunked, "SSE events depend on the chunking");

    let hub = hub();
    let _one_reply_at_a_time = hub.serial.lock().unwrap_or_else(|e| e.into_inner());
    *hub.reply.lock().unwrap_or_else(|e| e.into_inner()) = Reply {
        event_stream,
        chunks: body.chunks(chunk).map(<[u8]>::to_vec).collect(),
    };
    hub.runtime.block_on(async {
        let messages = [ChatMessage::new("user", "fuzz")];
        let Ok(mut stream) = hub.client.stream(&messages, None).await else {
            return;
        };
        let mut text = 0;
        while let Ok(Some(piece)) = stream.next().await {
            text += piece.len();
        }
        assert!(
            text <= MAX_REPLY_BYTES,
            "{text} bytes of text passed max_reply_bytes = {MAX_REPLY_BYTES}"
        );
        let _ = stream.tool_calls();
    });
}

fn parse_sse<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Vec<SseEvent> {
    let mut parser = SseParser::default();
    let mut events = Vec::new();
    for chunk in chunks {
        events.extend(parser.push(chunk));
    }
    events.extend(parser.finish());
    events
}

/// What the local server of [`sse`] answers to the next request.
#[derive(Default)]
struct Reply {
    event_stream: bool,
    chunks: Vec<Vec<u8>>,
}

struct Hub {
    runtime: tokio::runtime::Runtime,
    client: HubClient,
    reply: Mutex<Reply>,
    serial: Mutex<()>,
}

fn hub() -> &'static Hub {
    static HUB: OnceLock<Hub> = OnceLock::new();
    HUB.get_or_init(|| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a local port");
        let url = format!(
            "http://{}/v1",
            listener.local_addr().expect("the local address")
        );
        std::thread::spawn(move || {
            for connection in listener.incoming().flatten() {
                std::thread::spawn(move || serve(connection));
            }
        });
        let config = strawberry_spoke::config::HubConfig {
            endpoints: vec![strawberry_spoke::config::EndpointConfig {
                url,
                model: "fuzz".into(),
                api_key_file: None,
                api_key_env: None,
            }],
            // Every reply is complete at once: a wait this long is a hang.
            first_byte_timeout_ms: 5_000,
            chunk_timeout_ms: 5_000,
            retry_down_after_ms: 0,
            max_reply_bytes: MAX_REPLY_BYTES,
            ..Default::default()
        };
        Hub {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime"),
            client: HubClient::new(&config).expect("a hub client for the local server"),
            reply: Mutex::new(Reply::default()),
            serial: Mutex::new(()),
        }
    })
}

/// Answers each request on `connection` with the current [`Reply`], chunked.
fn serve(mut connection: std::net::TcpStream) {
    use std::io::{BufRead, BufReader, Read, Write};
    let Ok(reader) = connection.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(reader);
    loop {
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut request = vec![0; length];
        if reader.read_exact(&mut request).is_err() {
            return;
        }
        let mut response = Vec::new();
        {
            let reply = hub().reply.lock().unwrap_or_else(|e| e.into_inner());
            let kind = if reply.event_stream {
                "text/event-stream"
            } else {
                "application/json"
            };
            response.extend_from_slice(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                .as_bytes(),
            );
            for chunk in &reply.chunks {
                response.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                response.extend_from_slice(chunk);
                response.extend_from_slice(b"\r\n");
            }
            response.extend_from_slice(b"0\r\n\r\n");
        }
        if connection.write_all(&response).is_err() {
            return;
        }
    }
}

/// A skill file: the doc-comment parser and the loader, through the public loading
/// entry point, then what the daemon does with a loaded class (signatures, search).
pub fn skill_file(data: &[u8]) {
    let path = scratch_file("fuzzed.rhai", data);
    let settings = HostSettings {
        data_dir: scratch().join("skill-data"),
        ..HostSettings::default()
    };
    let Ok(class) = Registry::load_file(&path, &settings) else {
        return;
    };
    for function in &class.functions {
        let _ = function.signature();
    }
    let registry = Registry::new(vec![class], settings);
    let _ = registry.search("", 10);
    let _ = registry.search("fuzzed light timer", 10);
}

/// MQTT payloads from the network: a call request, a call response and a peer's
/// registration, parsed as the link does.
pub fn mqtt_payload(data: &[u8]) {
    if let Ok(request) = serde_json::from_slice::<CallRequest>(data) {
        let text = serde_json::to_vec(&request).expect("a parsed request serialises");
        let again: CallRequest =
            serde_json::from_slice(&text).expect("a serialised request parses");
        assert_eq!(
            again, request,
            "a call request does not survive a round trip"
        );
    }
    if let Ok(response) = serde_json::from_slice::<CallResponse>(data) {
        let _ = response.into_result();
    }
    let mut peers = Peers::default();
    if peers.set_registration(PEER_ID, data).is_ok() {
        for peer in peers.all() {
            for class in &peer.classes {
                for function in &class.functions {
                    let _ = function.signature();
                }
            }
        }
    }
}

/// A WAV file: the reader, then the resampler to 16 kHz in one go and streamed in
/// pieces, which must agree.
pub fn wav(data: &[u8]) {
    let path = scratch_file("fuzzed.wav", data);
    let Ok(recording) = read_wav(&path) else {
        return;
    };
    let rate = recording.sample_rate;
    let wanted = recording.samples.len() as u64 * 16_000 / u64::from(rate.max(1));
    if wanted > MAX_RESAMPLED {
        return;
    }
    let whole = resample(&recording.samples, rate, 16_000);
    let mut resampler = Resampler::new(rate, 16_000);
    let mut streamed = Vec::new();
    // Piece sizes from the data, so different inputs split differently.
    let piece = usize::from(data.last().copied().unwrap_or(0)) + 1;
    for samples in recording.samples.chunks(piece) {
        resampler.push(samples, &mut streamed);
    }
    resampler.finish(&mut streamed);
    assert_eq!(
        whole.len(),
        streamed.len(),
        "streamed resampling gives a different length"
    );
    let worst = whole
        .iter()
        .zip(&streamed)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst <= RESAMPLE_TOLERANCE,
        "streamed resampling differs from resampling in one go by {worst}"
    );
}

/// The configuration: bytes up to the first NUL are the file, the rest lines of
/// `NAME=VALUE` environment overrides (`STRAWBERRY_SPOKE__SECTION__KEY`).
pub fn config(data: &[u8]) {
    let (file, env) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let path = scratch_file("config.toml", file);
    let env: Vec<(String, String)> = String::from_utf8_lossy(env)
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    let Ok(config) = Config::load(Some(&path), env) else {
        return;
    };
    let _ = config.to_masked_toml();
}
