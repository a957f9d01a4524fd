//! The real capture path: cpal opens ALSA devices fed from FIFOs at real-time pace
//! (`tests/support/alsa.rs`), and what comes out must be the same sound at 16 kHz mono.
//!
//! A test binary of its own, not a module of the integration binary: ALSA reads its
//! configuration from `HOME` once per process, and `support::alsa` points this process's
//! `HOME` at the fake sound cards, which no test of another file should inherit.

mod support {
    pub mod alsa;
    #[allow(dead_code, reason = "this binary polls without tokio")]
    pub mod poll;
}

use support::{alsa, poll};

use std::process::Command;
use std::time::{Duration, Instant};

use alsa::{Feeder, MIC_16K_MONO, MIC_44K_STEREO, Segment, chirp, interleave, sine};
use strawberry_spoke::audio::{
    Capture, CaptureSettings, CaptureStatus, Frame, PreRoll, SAMPLE_RATE, ms_to_samples,
};

/// Capture from a fake input at the format its FIFO carries (s16le, its rate and
/// channels), quick retries.
fn settings_for(mic: alsa::Mic) -> CaptureSettings {
    CaptureSettings {
        rate: Some(mic.rate),
        channels: Some(mic.channels),
        format: Some(cpal::SampleFormat::I16),
        ..settings(mic.name)
    }
}

fn settings(input: &str) -> CaptureSettings {
    CaptureSettings {
        input: input.into(),
        retry_min: Duration::from_millis(50),
        retry_max: Duration::from_millis(200),
        stall_timeout: Duration::from_millis(600),
        rate: None,
        channels: None,
        format: None,
    }
}

/// Drops `capture`, which must return within `limit`: stopping waits for no device.
fn stops_within(capture: Capture, limit: Duration) {
    let started = Instant::now();
    drop(capture);
    let waited = started.elapsed();
    assert!(waited < limit, "stopping the capture took {waited:?}");
}

/// Frames until `until` returns true or `limit` passes; checks positions are contiguous.
fn collect(capture: &Capture, limit: Duration, mut until: impl FnMut(&[f32]) -> bool) -> Vec<f32> {
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    let mut next = None;
    while Instant::now() < deadline {
        let Ok(frame) = capture.frames().recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        if let Some(next) = next {
            assert_eq!(frame.start, next, "frames must be contiguous");
        }
        next = Some(frame.end());
        out.extend_from_slice(&frame.samples);
        if until(&out) {
            break;
        }
    }
    out
}

/// Indices of samples louder than `level`: where the signal is.
fn loud_span(x: &[f32], level: f32) -> (usize, usize) {
    let first = x
        .iter()
        .position(|v| v.abs() > level)
        .expect("no signal arrived");
    let last = x.iter().rposition(|v| v.abs() > level).unwrap_or(first);
    (first, last)
}

fn rms(x: &[f32]) -> f64 {
    (x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / x.len().max(1) as f64).sqrt()
}

/// Frequency from upward zero crossings over a span.
fn frequency(x: &[f32]) -> f64 {
    let ups = x.windows(2).filter(|w| w[0] < 0.0 && w[1] >= 0.0).count();
    ups as f64 * f64::from(SAMPLE_RATE) / x.len() as f64
}

/// The best normalised correlation of `needle` within `hay`, and where.
fn best_match(hay: &[f32], needle: &[f32]) -> (f64, usize) {
    let norm_n = needle
        .iter()
        .map(|&v| f64::from(v).powi(2))
        .sum::<f64>()
        .sqrt();
    let mut best = (0.0, 0);
    for lag in 0..=hay.len().saturating_sub(needle.len()) {
        let window = &hay[lag..lag + needle.len()];
        let dot: f64 = window
            .iter()
            .zip(needle)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        let norm_w = window
            .iter()
            .map(|&v| f64::from(v).powi(2))
            .sum::<f64>()
            .sqrt();
        let c = dot / (norm_n * norm_w + 1e-12);
        if c > best.0 {
            best = (c, lag);
        }
    }
    best
}

#[test]
fn stereo_44k_integers_arrive_as_16k_mono() {
    let _alsa = alsa::lock();
    // 0.3 s of silence, then 1 s of 440 Hz: 0.6 on the left, 0.2 on the right, so the
    // mono mix (their mean) is 0.4; a left-only or summed mix would be 0.6 or 0.8.
    let rate = MIC_44K_STEREO.rate;
    let mut left = vec![0.0; (rate as f64 * 0.3) as usize];
    let mut right = left.clone();
    left.extend(sine(440.0, rate, 1.0, 0.6));
    right.extend(sine(440.0, rate, 1.0, 0.2));
    // Trailing silence pushes the tone's end through the device's buffers.
    left.extend(vec![0.0; rate as usize]);
    right.extend(vec![0.0; rate as usize]);
    let feeder = Feeder::start(
        MIC_44K_STEREO,
        vec![Segment::Audio(interleave(&[left, right]))],
    );
    let capture = Capture::start(settings_for(MIC_44K_STEREO)).unwrap();
    let got = collect(&capture, Duration::from_secs(6), |x| {
        // Stop half a second after the tone ends.
        x.iter()
            .rposition(|v| v.abs() > 0.2)
            .is_some_and(|last| x.len() > last + 8000)
    });
    let status = capture.status();
    drop(feeder);
    drop(capture);
    assert!(
        matches!(status, CaptureStatus::Running { .. }),
        "{status:?}"
    );
    let (first, last) = loud_span(&got, 0.2);
    let tone = &got[first..=last];
    let seconds = tone.len() as f64 / f64::from(SAMPLE_RATE);
    assert!(
        (seconds - 1.0).abs() < 0.02,
        "tone lasted {seconds:.3} s at 16 kHz ({status:?}, {} samples, span {first}..{last}, freq {:.1})",
        got.len(),
        frequency(tone)
    );
    let middle = &tone[1600..tone.len() - 1600];
    let f = frequency(middle);
    assert!((f - 440.0).abs() < 3.0, "frequency {f:.1} Hz");
    let level = rms(middle) * std::f64::consts::SQRT_2;
    assert!((level - 0.4).abs() < 0.02, "amplitude {level:.3}");
    eprintln!(
        "44.1 kHz stereo -> 16 kHz mono: {status:?}; tone {seconds:.3} s, {f:.1} Hz, amplitude {level:.3}"
    );
}

#[test]
fn mono_16k_arrives_unchanged_and_pre_roll_holds_what_came_before_the_trigger() {
    let _alsa = alsa::lock();
    let rate = MIC_16K_MONO.rate;
    let sweep = chirp(200.0, 3000.0, rate, 1.0, 0.5);
    let mut source = vec![0.0; (rate as f64 * 0.5) as usize];
    source.extend(&sweep);
    source.extend(vec![0.0; rate as usize]);
    let feeder = Feeder::start(MIC_16K_MONO, vec![Segment::Audio(source)]);
    let capture = Capture::start(settings_for(MIC_16K_MONO)).unwrap();

    // The consumer keeps a 500 ms pre-roll and "triggers" 300 ms into the sweep, as a
    // wake word would fire after it was said.
    let mut pre_roll = PreRoll::new(ms_to_samples(500));
    let mut received: Vec<Frame> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut onset = None;
    let trigger = loop {
        assert!(
            Instant::now() < deadline,
            "no trigger: the sweep never arrived"
        );
        let Ok(frame) = capture.frames().recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        pre_roll.push(&frame);
        if onset.is_none()
            && let Some(i) = frame.samples.iter().position(|v| v.abs() > 0.05)
        {
            onset = Some(frame.start + i as u64);
        }
        let end = frame.end();
        received.push(frame);
        if onset.is_some_and(|o| end >= o + ms_to_samples(300) as u64) {
            break end;
        }
    };
    // Keep reading to the end of the sweep for the whole-signal check.
    let mut all: Vec<f32> = received.iter().flat_map(|f| f.samples.clone()).collect();
    all.extend(collect(&capture, Duration::from_secs(3), |x| {
        x.len() > 16_000
    }));
    drop(feeder);
    drop(capture);

    if let Some(path) = std::env::var_os("SPOKE_TEST_DUMP") {
        let bytes: Vec<u8> = all.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(path, bytes).unwrap();
    }
    // The whole sweep arrives as itself.
    let (c, lag) = best_match(&all, &sweep);
    assert!(c > 0.99, "correlation with the source {c:.4} at {lag}");

    // The pre-roll ends at the trigger and holds the 500 ms before it: silence, then
    // the first ~300 ms of the sweep, exactly where it was in the stream.
    let (start, held) = pre_roll.contents();
    assert_eq!(held.len(), ms_to_samples(500));
    assert_eq!(start + held.len() as u64, trigger);
    let first_frame = received[0].start;
    let offset = (start - first_frame) as usize;
    assert_eq!(&held[..], &all[offset..offset + held.len()]);
    // The trigger came at the end of the frame 300 ms after the onset, so the sweep
    // starts 500 - 300 ms (less up to one frame) into the pre-roll.
    let sweep_in_pre_roll = lag as i64 - offset as i64;
    let expected = (ms_to_samples(200) - 320) as i64..=ms_to_samples(200) as i64 + 16;
    assert!(
        expected.contains(&sweep_in_pre_roll),
        "the sweep starts {sweep_in_pre_roll} samples into the pre-roll, expected {expected:?}"
    );
    assert!(
        held[..(sweep_in_pre_roll - 16) as usize]
            .iter()
            .all(|v| v.abs() < 0.01)
    );
    let (c, _) = best_match(&held, &sweep[..3200]);
    assert!(
        c > 0.99,
        "the sweep's first 200 ms in the pre-roll: correlation {c:.4}"
    );
    eprintln!("16 kHz mono: correlation {c:.4}; pre-roll {start}..{trigger}");
}

#[test]
fn missing_input_names_the_inputs_that_exist_and_keeps_retrying() {
    let _alsa = alsa::lock();
    let capture = Capture::start(settings("no-such-mic")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        let status = capture.status();
        if let CaptureStatus::Retrying { attempts, .. } = &status
            && *attempts >= 4
        {
            break status;
        }
        assert!(Instant::now() < deadline, "{status:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let CaptureStatus::Retrying { error, next_in, .. } = &status else {
        unreachable!()
    };
    assert!(error.contains("\"no-such-mic\""), "{error}");
    assert!(
        error.contains(MIC_44K_STEREO.name) && error.contains(MIC_16K_MONO.name),
        "the error lists the inputs: {error}"
    );
    assert!(
        error.contains("audio.input"),
        "the error says what to set: {error}"
    );
    assert_eq!(*next_in, Duration::from_millis(200), "backoff is capped");
    assert!(capture.frames().try_recv().is_err());
    stops_within(capture, Duration::from_secs(1));
}

#[test]
fn an_input_no_clock_paces_is_named_and_backed_off_from() {
    let _alsa = alsa::lock();
    // ALSA's `null` device returns silence as fast as it is read (3 s of it in 9 ms
    // here), as a `file` device does once its source has ended: read at the device's
    // pace, it would spin a core and bury the listener in silence.
    let input = CaptureSettings {
        rate: Some(SAMPLE_RATE),
        channels: Some(1),
        format: Some(cpal::SampleFormat::I16),
        ..settings("null")
    };
    let capture = Capture::start(input).unwrap();
    // Each time it opens fine and runs ahead of the clock, and each time the wait before
    // the next try doubles, as for a device that does not open at all.
    let (error, next_in) = poll::wait_for(
        "the capture to give up on the unpaced input three times in a row",
        Duration::from_secs(10),
        || match capture.status() {
            CaptureStatus::Retrying {
                error,
                attempts: 3..,
                next_in,
            } => Some((error, next_in)),
            _ => None,
        },
    );
    assert!(error.contains("\"null\""), "names the input: {error}");
    assert!(error.contains("audio.input"), "says what to set: {error}");
    assert_eq!(next_in, Duration::from_millis(200), "backoff is capped");
    stops_within(capture, Duration::from_secs(1));
}

#[test]
fn a_microphone_whose_source_ends_is_let_go_and_stopping_waits_for_nothing() {
    let _alsa = alsa::lock();
    // A FIFO-fed `file` device: once its last writer closes it, the device reads silence
    // as fast as it is read (the daemon spun two cores on it), and opening it again
    // waits for a writer that never comes.
    let mic = alsa::MIC_THAT_ENDS;
    let feeder = Feeder::start(mic, vec![Segment::Audio(sine(440.0, mic.rate, 0.5, 0.5))]);
    let capture = Capture::start(settings_for(mic)).unwrap();
    poll::wait_until("frames from the microphone", Duration::from_secs(5), || {
        capture.frames().try_recv().is_ok()
    });
    drop(feeder);
    let error = poll::wait_for(
        "the capture to give up on the ended source",
        Duration::from_secs(10),
        || match capture.status() {
            CaptureStatus::Retrying { error, .. } => Some(error),
            _ => None,
        },
    );
    assert!(error.contains(mic.name), "names the input: {error}");
    assert!(error.contains("audio.input"), "says what to set: {error}");
    // Reopening is now blocked inside ALSA, waiting for a writer: stopping still returns.
    stops_within(capture, Duration::from_secs(4));
    // A writer lets the abandoned open finish, and the thread, told to stop, ends.
    drop(Feeder::start(mic, vec![]));
}

#[test]
fn a_stream_that_stops_delivering_is_reopened() {
    let _alsa = alsa::lock();
    let rate = MIC_16K_MONO.rate;
    let feeder = Feeder::start(
        MIC_16K_MONO,
        vec![
            Segment::Audio(sine(300.0, rate, 0.5, 0.5)),
            // The device goes quiet past the stall timeout (like an unplugged USB mic
            // whose driver reports nothing)...
            Segment::Pause(Duration::from_millis(1500)),
            // ...and comes back with a different tone.
            Segment::Audio(sine(1000.0, rate, 0.8, 0.5)),
            Segment::Audio(vec![0.0; rate as usize]),
        ],
    );
    let capture = Capture::start(settings_for(MIC_16K_MONO)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after: Vec<f32> = Vec::new();
    let mut last: Option<(u64, u64)> = None;
    let mut widest_gap = 0;
    let mut reopened = false;
    while Instant::now() < deadline && after.len() < 8000 {
        let Ok(frame) = capture.frames().recv_timeout(Duration::from_millis(50)) else {
            continue;
        };
        if let Some((start, end)) = last {
            assert!(
                frame.start >= end && frame.start > start,
                "positions only grow"
            );
            widest_gap = widest_gap.max(frame.start - end);
        }
        last = Some((frame.start, frame.end()));
        reopened |= matches!(capture.status(), CaptureStatus::Running { opened: 2.., .. });
        if reopened && rms(&frame.samples) > 0.2 {
            after.extend(&frame.samples);
        }
    }
    let status = capture.status();
    drop(feeder);
    drop(capture);
    assert!(reopened, "the stall was never noticed: {status:?}");
    assert!(
        after.len() >= 8000,
        "no audio after reopening ({} samples)",
        after.len()
    );
    let f = frequency(&after[..8000]);
    assert!((f - 1000.0).abs() < 10.0, "after reopening: {f:.1} Hz");
    // The stall lasted at least the 600 ms timeout (the watch notices frames to within
    // 100 ms): the positions say that much audio was lost (half a second at 16 kHz).
    assert!(
        widest_gap >= 8_000,
        "positions moved on by only {widest_gap} samples across the reopen"
    );
}

#[test]
fn devices_command_lists_inputs_with_formats() {
    let _alsa = alsa::lock();
    // Listing opens each device, and opening a FIFO-fed one needs a writer.
    let feeders: Vec<Feeder> = alsa::MICS
        .iter()
        .map(|&mic| Feeder::start(mic, vec![]))
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_strawberry-spoke"))
        .args(["audio", "devices"])
        .env("HOME", std::env::var_os("HOME").unwrap())
        .output()
        .expect("run strawberry-spoke");
    drop(feeders);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inputs = text.split("outputs:").next().unwrap();
    assert!(
        inputs.contains(&format!(
            "{}  {}",
            MIC_44K_STEREO.name, MIC_44K_STEREO.description
        )),
        "{text}"
    );
    assert!(inputs.contains("Hz, channels 1-"), "{text}");
    assert!(inputs.contains("i16") && inputs.contains("f32"), "{text}");
    assert!(text.contains("* default"), "{text}");
}
