//! The room in the loop: a running daemon's microphone hears its own speaker, as a
//! spoke on a kitchen shelf does.
//!
//! The daemon's speaker is an ALSA `file` device writing into a FIFO (see
//! [`super::daemon::Spoke::speaker_in_room`]). This side reads it at real-time pace, 20 ms
//! for every 20 ms chunk the [`Mouth`](super::mouth::Mouth) writes into the microphone's
//! FIFO, and adds what the microphone would hear of it: converted to 16 kHz and passed
//! through the room of `tests/support/room.rs` (a delay, a reverberant tail,
//! attenuation). The speaker's `file` device runs over `null`, which takes samples as
//! fast as they come, so the FIFO is what paces the daemon's playback: it blocks while
//! the pipe is full. The pipe is shrunk to a few tens of milliseconds so the delay
//! between the daemon handing a buffer to its echo canceller and the microphone hearing
//! it stays what a sound card's buffers make it, not the 64 KiB a pipe holds by default.
#![allow(dead_code)] // each test uses its own part of the support tree

use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use strawberry_spoke::audio::resample::Resampler;

use super::mouth::{Background, CHUNK};
use super::room::taps;

/// The format cpal opens an ALSA `file` device at, its default for a device that takes
/// anything: stereo f32 at 48 kHz.
const SPEAKER_RATE: u32 = 48_000;
const SPEAKER_CHANNELS: usize = 2;
const FRAME_BYTES: usize = SPEAKER_CHANNELS * 4;

/// Speaker bytes per 20 ms microphone chunk.
const CHUNK_BYTES: usize = SPEAKER_RATE as usize / 50 * FRAME_BYTES;

/// The speaker's pipe: four pages, two chunks and a bit (43 ms of audio).
const PIPE_BYTES: i32 = 16_384;

/// A chunk of echo louder than this (RMS, full scale 1) counts as the speaker heard.
const AUDIBLE_RMS: f32 = 0.003;

/// How the speaker reaches the microphone.
#[derive(Debug, Clone, Copy)]
pub struct Acoustics {
    /// Sound's travel and the card's latency beyond the pipe's, ms.
    pub delay_ms: usize,
    /// The direct sound's gain from the speaker's samples to the microphone's.
    pub gain: f32,
}

/// What the microphone heard of the speaker so far.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Heard {
    /// 20 ms chunks with the speaker audible at the microphone.
    pub audible_chunks: u64,
    /// Their summed power (for the echo's level against a person's).
    pub audible_power: f64,
}

impl Heard {
    /// Counts `chunk` when it is audible.
    pub fn add(&mut self, chunk: &[f32]) {
        let power = chunk.iter().map(|&s| f64::from(s * s)).sum::<f64>() / chunk.len() as f64;
        if power.sqrt() > f64::from(AUDIBLE_RMS) {
            self.audible_chunks += 1;
            self.audible_power += power;
        }
    }

    /// The echo's mean level while audible, dB full scale.
    pub fn level_db(&self) -> f64 {
        10.0 * (self.audible_power / self.audible_chunks.max(1) as f64 + 1e-12).log10()
    }
}

/// The speaker's side of the room; what it heard, shared with the microphone's thread.
pub struct LiveRoom {
    heard: Arc<Mutex<Heard>>,
}

impl LiveRoom {
    /// Opens the speaker's FIFO at `speaker` (before the daemon does, so its open does not
    /// wait for a reader) and returns the room with the [`Background`] to give the
    /// microphone's [`Mouth`](super::mouth::Mouth).
    pub fn open(speaker: &Path, acoustics: Acoustics) -> (LiveRoom, Background) {
        // Read-write, so the daemon closing its end between replies is no end-of-file.
        let mut fifo = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(speaker)
            .expect("open the speaker's FIFO");
        // SAFETY: fcntl on a descriptor this function owns; F_SETPIPE_SZ takes an int.
        let resized = unsafe { libc::fcntl(fifo.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
        assert!(resized >= PIPE_BYTES, "F_SETPIPE_SZ: {resized}");
        let heard = Arc::new(Mutex::new(Heard::default()));
        let shared = heard.clone();
        let taps = taps(acoustics.delay_ms, acoustics.gain);
        let longest = taps.iter().map(|&(k, _)| k).max().unwrap_or(0) + 1;
        let mut history = vec![0.0f32; longest];
        let mut now = 0usize;
        let mut resampler = Resampler::new(SPEAKER_RATE, 16_000).expect("48 kHz");
        let mut pending: Vec<u8> = Vec::with_capacity(2 * CHUNK_BYTES);
        let mut played: VecDeque<f32> = VecDeque::new();
        let mut mono = Vec::with_capacity(CHUNK_BYTES / FRAME_BYTES);
        let mut converted = Vec::with_capacity(CHUNK);
        let background: Background = Box::new(move |chunk| {
            read_chunk(&mut fifo, &mut pending);
            mono.clear();
            let whole = pending.len() / FRAME_BYTES * FRAME_BYTES;
            for frame in pending[..whole].chunks_exact(FRAME_BYTES) {
                let left = f32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]);
                assert!(
                    left.is_finite() && left.abs() <= 1.001,
                    "the speaker's FIFO does not carry stereo f32 at 48 kHz ({left})"
                );
                mono.push(left);
            }
            pending.drain(..whole);
            converted.clear();
            resampler.push(&mono, &mut converted);
            played.extend(&converted);
            let mut echo = [0.0f32; CHUNK];
            for (s, e) in chunk.iter_mut().zip(&mut echo) {
                now = (now + 1) % longest;
                history[now] = played.pop_front().unwrap_or(0.0);
                *e = taps
                    .iter()
                    .map(|&(k, h)| h * history[(now + longest - k) % longest])
                    .sum();
                *s += *e;
            }
            shared.lock().expect("heard").add(&echo);
        });
        (LiveRoom { heard }, background)
    }

    /// What the microphone heard of the speaker so far.
    pub fn heard(&self) -> Heard {
        *self.heard.lock().expect("heard")
    }
}

/// Reads up to one chunk's bytes of what the speaker has written, without waiting.
fn read_chunk(fifo: &mut File, pending: &mut Vec<u8>) {
    let mut buf = [0u8; CHUNK_BYTES];
    let mut got = 0;
    while got < CHUNK_BYTES {
        match fifo.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("reading the speaker's FIFO: {e}"),
        }
    }
    pending.extend_from_slice(&buf[..got]);
}
