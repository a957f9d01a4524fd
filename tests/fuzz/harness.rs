//! The bodies of the fuzz targets (issue 14), as plain functions of the input bytes.
//!
//! Shared by the libFuzzer binaries (`tests/fuzz/targets/`, through the fuzz crate)
//! and by `tests/fuzz_replay.rs`, which runs every corpus file through them in the
//! normal test suite, uninstrumented. Each target uses the crate's public API the way
//! the daemon does and returns normally whatever the code under test makes of the
//! input; a finding is a panic (a failed check below included), a hang, or an
//! allocation over the fuzzer's limit.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use strawberry_spoke::audio::resample::Resampler;
use strawberry_spoke::audio::wav::read_wav_16k;
use strawberry_spoke::config::Config;
use strawberry_spoke::host::HostSettings;
use strawberry_spoke::hub::HubError;
use strawberry_spoke::hub::sse::{EventTooLarge, SseEvent, SseParser};
use strawberry_spoke::hub::stream::{Assembler, StreamLimits};
use strawberry_spoke::mqtt::PeerLimits;
use strawberry_spoke::mqtt::peers::Peers;
use strawberry_spoke::mqtt::protocol::{CallRequest, CallResponse};
use strawberry_spoke::skills::Registry;

/// The device id registrations are published for in [`mqtt_payload`].
const PEER_ID: &str = "fuzzed";

/// The reply limits of [`sse`]: small, so that inputs of a few KiB reach them.
const LIMITS: StreamLimits = StreamLimits {
    max_reply_bytes: 1024,
    max_event_bytes: 512,
    max_tool_calls: 4,
};

/// The registration limits of [`mqtt_payload`]: small, for the same reason.
const PEER_LIMITS: PeerLimits = PeerLimits {
    registration_bytes: 2048,
    peers: 4,
    classes: 3,
    functions: 6,
    requests: 12,
    name_bytes: 32,
    summary_bytes: 128,
    text_bytes: 512,
};

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
/// whether it is an event stream or a plain JSON body. The parser must yield the same
/// events however the bytes are chunked; the [`Assembler`] must keep the reply within
/// its limits (small here, so inputs reach them).
pub fn sse(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(mode & 0x3f) + 1;
    let event_stream = mode & 0x80 == 0;

    let whole = parse_sse([body]);
    let chunked = parse_sse(body.chunks(chunk));
    match (&whole, &chunked) {
        (Ok(whole), Ok(chunked)) => assert_eq!(whole, chunked, "SSE events depend on the chunking"),
        // Events before the error are lost with it, as many as the chunking says.
        (Err(_), Err(_)) => {}
        _ => panic!("the SSE bound depends on the chunking: {whole:?} vs {chunked:?}"),
    }

    let mut reply = Assembler::new(LIMITS, event_stream);
    let mut text = 0;
    let fed = body.chunks(chunk).try_for_each(|piece| {
        reply.feed(piece)?;
        while let Some(piece) = reply.next_piece() {
            text += piece.len();
        }
        Ok::<_, HubError>(())
    });
    if fed.is_ok() && reply.finish().is_ok() {
        while let Some(piece) = reply.next_piece() {
            text += piece.len();
        }
    }
    let calls = reply.tool_calls();
    assert!(
        calls.len() <= LIMITS.max_tool_calls,
        "{} tool calls passed max_tool_calls",
        calls.len()
    );
    let call_bytes: usize = calls
        .iter()
        .map(|c| c.function.name.len() + c.function.arguments.len())
        .sum();
    assert!(
        text + call_bytes <= LIMITS.max_reply_bytes,
        "{text} bytes of text and {call_bytes} of tool calls passed max_reply_bytes"
    );
}

fn parse_sse<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<SseEvent>, EventTooLarge> {
    let mut parser = SseParser::new(LIMITS.max_event_bytes);
    let mut events = Vec::new();
    for chunk in chunks {
        events.extend(parser.push(chunk)?);
    }
    events.extend(parser.finish()?);
    Ok(events)
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
    let mut peers = Peers::new("Fuzz Spoke", PEER_LIMITS);
    if peers.set_registration(PEER_ID, data).is_ok() {
        for peer in peers.all() {
            assert!(
                peer.classes.len() <= PEER_LIMITS.classes,
                "classes over the limit"
            );
            let functions: usize = peer.classes.iter().map(|c| c.functions.len()).sum();
            assert!(
                functions <= PEER_LIMITS.functions,
                "functions over the limit"
            );
            for class in peer.classes.iter() {
                for function in &class.functions {
                    let _ = function.signature();
                }
            }
            let _ = peers.resolve(&peer.name);
        }
    }
}

/// A WAV file: the reader and the conversion to 16 kHz the daemon uses, then the
/// resampler streamed in pieces, which must agree with it.
pub fn wav(data: &[u8]) {
    let path = scratch_file("fuzzed.wav", data);
    let Ok((whole, recording)) = read_wav_16k(&path) else {
        return;
    };
    let mut resampler = Resampler::new(recording.sample_rate, 16_000)
        .expect("read_wav_16k converted from this rate");
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
    assert!(
        recording.samples.iter().all(|s| s.abs() <= 1.0),
        "read_wav gave a sample past full scale"
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
