//! `audio echo`: the daemon's echo canceller over a recording of what the speaker played
//! and what the microphone heard, to see on a board whether it finds the delay, how much
//! echo it takes out and what it costs there.
//!
//! The played recording goes to the canceller's reference in 10 ms buffers at its own rate,
//! as the speaker's callback hands them over in `run`, and the heard one is cut into the
//! capture's 20 ms frames, each frame's played audio handed over just before it: the two
//! recordings are taken to start at the same moment, and the delay between them is the
//! canceller's to find.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use super::{print_out, thread_cpu};
use crate::audio::echo::{self, EchoHealth};
use crate::audio::wav::{frames, read_wav, read_wav_16k, write_wav};
use crate::audio::{FRAME_SAMPLES, SAMPLE_RATE};

/// AEC3 works in blocks of 10 ms; the speaker's buffers are handed over 10 ms at a time.
const BLOCK_MS: u32 = 10;

pub(super) fn test(played: &Path, heard: &Path, out: Option<&Path>) -> Result<ExitCode> {
    match cancel(played, heard, out) {
        Ok(text) => {
            print_out(&text)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            Ok(ExitCode::from(2))
        }
    }
}

/// Runs the canceller over the recordings; what it found, for stdout.
fn cancel(played: &Path, heard: &Path, out: Option<&Path>) -> Result<String> {
    let played = read_wav(played)?;
    let (heard_samples, _) = read_wav_16k(heard)?;
    let (reference, mut canceller) = echo::pair()?;
    // The speaker's buffers: 10 ms at the played file's rate, two to a capture frame.
    let buffer = (played.sample_rate * BLOCK_MS / 1000).max(1) as usize;
    let mut buffers = played.samples.chunks(buffer);
    let block = (SAMPLE_RATE * BLOCK_MS / 1000) as usize;
    let per_frame = FRAME_SAMPLES / block;
    let mut cleaned = Vec::with_capacity(heard_samples.len());
    let mut cpu = Duration::ZERO;
    let mut blocks = 0usize;
    for mut frame in frames(&heard_samples, 0) {
        for _ in 0..per_frame {
            // Silence once the reply is over, as the speaker's callback plays it.
            let samples = buffers
                .next()
                .map_or_else(|| vec![0.0; buffer], <[f32]>::to_vec);
            reference.played(samples, played.sample_rate);
        }
        let start = thread_cpu();
        canceller.process(&mut frame)?;
        cpu += thread_cpu().saturating_sub(start);
        // A file's last frame may end in part of a block, which is passed on as heard.
        blocks += frame.samples.len() / block;
        cleaned.extend(frame.samples);
    }
    if let Some(out) = out {
        write_wav(out, &cleaned, SAMPLE_RATE)?;
    }
    let stats = canceller.stats();
    let seconds = heard_samples.len() as f64 / f64::from(SAMPLE_RATE);
    let per_block = cpu.as_secs_f64() / blocks.max(1) as f64;
    let mut text = format!(
        "{}: {seconds:.2} s, {}\n",
        heard.display(),
        match &stats.health {
            EchoHealth::Cancelling { delay_ms } => format!("delay found: {delay_ms} ms"),
            EchoHealth::DelayNotFound => "no delay found: the microphone does not seem to hear what was played (are the two recordings of the same moment, from the speaker next to this microphone?)".into(),
            EchoHealth::Searching | EchoHealth::Idle => "no delay found yet: the canceller needs a few seconds of played sound to lock on (is the played recording long and loud enough?)".into(),
            EchoHealth::ReferenceLost { buffers } => format!("{buffers} played buffers lost"),
        }
    );
    if let Some(erle) = stats.erle_db {
        text.push_str(&format!("  echo removed (ERLE): {erle:.1} dB\n"));
    }
    text.push_str(&format!(
        "  CPU: {:.0} µs per {BLOCK_MS} ms block, {:.2}% of one core\n",
        per_block * 1e6,
        per_block * 100.0 / (f64::from(BLOCK_MS) / 1000.0)
    ));
    if let Some(out) = out {
        text.push_str(&format!("  wrote {}\n", out.display()));
    }
    Ok(text)
}
