//! The echo canceller through its public ends: a speaker's callback handing what it
//! plays (48 kHz, in callback-sized buffers, with the first buffers ahead as ALSA
//! fills its buffer) and microphone frames that hear it through a room: delayed,
//! reverberated, attenuated, plus a person speaking and noise. Speech is the espeak-ng
//! recordings `tests/setup.sh` made; the room is `tests/support/room.rs`.

use std::path::Path;
use std::process::Command;

use crate::support::room::{CALLBACK, SPEAKER_RATE, echo_of, noise, play_and_cancel, power};
use strawberry_spoke::audio::echo::{self, EchoHealth};
use strawberry_spoke::audio::resample::resample;
use strawberry_spoke::audio::wav::{read_wav_16k, write_wav};
use strawberry_spoke::audio::{FRAME_SAMPLES, Frame, SAMPLE_RATE};

fn speech(names: &[&str]) -> Vec<f32> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/stt-test/wav");
    let mut out = Vec::new();
    for name in names {
        let path = dir.join(format!("{name}.wav"));
        let (samples, _) = read_wav_16k(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run tests/setup.sh first)", path.display()));
        out.extend(samples);
        out.extend(vec![0.0; SAMPLE_RATE as usize / 5]);
    }
    out
}

#[test]
fn the_reply_is_taken_out_of_the_microphone_and_the_person_is_kept() {
    let sr = SAMPLE_RATE as usize;
    let reply = speech(&["en-us-01", "en-us-02", "en-us-03", "en-us-04"]);
    let person = speech(&["en-gb-x-rp_m3-05"]);
    let mut render = vec![0.0f32; sr];
    render.extend(&reply);
    let person_at = render.len() + sr / 2;
    let len = (person_at + person.len() + sr) / FRAME_SAMPLES * FRAME_SAMPLES;
    render.resize(len, 0.0);
    let echo = echo_of(&render, 100, 0.6, len);
    let mut near = vec![0.0f32; len];
    for (i, &s) in person.iter().enumerate() {
        near[person_at + i] = s * 0.3;
    }
    let mut seed = 1;
    let mic: Vec<f32> = (0..len)
        .map(|i| echo[i] + near[i] + 0.003 * noise(&mut seed))
        .collect();

    let (reference, mut canceller) = echo::pair().unwrap();
    let out = play_and_cancel(&reference, &mut canceller, &render, &mic, 60).out;

    // The echo while the reply plays, once the canceller has had 4 s to find it.
    let (from, to) = (5 * sr, sr + reply.len());
    let erle = 10.0 * (power(&mic[from..to]) / power(&out[from..to])).log10();
    let stats = canceller.stats();
    assert!(erle >= 15.0, "echo only {erle:.1} dB quieter; {stats:?}");
    let Some(delay) = stats.delay_ms else {
        panic!("no delay estimate: {stats:?}")
    };
    assert!(
        (70..=130).contains(&delay),
        "delay {delay} ms, played 100 ms before heard"
    );
    assert!(
        matches!(stats.health, EchoHealth::Cancelling { .. }),
        "{stats:?}"
    );
    // The person after the reply: still there at much the same level.
    let person_span = person_at..person_at + person.len();
    let kept = power(&out[person_span.clone()]) / power(&mic[person_span]);
    assert!(
        kept > 0.5,
        "only {:.0}% of the person's speech energy kept",
        kept * 100.0
    );
}

#[test]
fn a_reply_the_microphone_never_hears_is_reported_as_no_delay_found() {
    let reply = speech(&[
        "en-us-05", "en-us-06", "en-us-07", "en-us-08", "en-us-09", "en-us-10",
    ]);
    let len = reply.len() / FRAME_SAMPLES * FRAME_SAMPLES;
    let mut seed = 3;
    let mic: Vec<f32> = (0..len).map(|_| 0.003 * noise(&mut seed)).collect();
    let (reference, mut canceller) = echo::pair().unwrap();
    play_and_cancel(&reference, &mut canceller, &reply[..len], &mic, 0);
    assert_eq!(canceller.health(), &EchoHealth::DelayNotFound);
    assert!(EchoHealth::DelayNotFound.note().is_some());
}

/// More played buffers than the reference's queue holds, none collected yet.
fn overfilled() -> (echo::Reference, echo::Canceller) {
    let (reference, canceller) = echo::pair().unwrap();
    for _ in 0..2_000 {
        reference.played(vec![0.1; CALLBACK], SPEAKER_RATE);
    }
    (reference, canceller)
}

fn one_silent_frame(canceller: &mut echo::Canceller) {
    let mut frame = Frame {
        start: 0,
        samples: vec![0.0; FRAME_SAMPLES],
    };
    canceller.process(&mut frame).unwrap();
}

#[test]
fn audio_played_while_the_microphone_is_silent_is_dropped_not_reported_lost() {
    let (reference, mut canceller) = overfilled();
    canceller.microphone_silent();
    reference.played(vec![0.1; CALLBACK], SPEAKER_RATE);
    one_silent_frame(&mut canceller);
    assert!(
        !matches!(canceller.health(), EchoHealth::ReferenceLost { .. }),
        "{:?}",
        canceller.health()
    );
}

#[test]
fn played_audio_the_capture_side_never_collects_is_reported_lost() {
    let (_reference, mut canceller) = overfilled();
    one_silent_frame(&mut canceller);
    assert!(
        matches!(canceller.health(), EchoHealth::ReferenceLost { buffers } if *buffers > 0),
        "{:?}",
        canceller.health()
    );
}

#[test]
fn a_person_speaking_over_the_reply_is_let_through() {
    let sr = SAMPLE_RATE as usize;
    let reply = speech(&[
        "en-us-01", "en-us-02", "en-us-03", "en-us-04", "en-us-05", "en-us-06",
    ]);
    let person = speech(&["en-gb-x-rp_m3-05"]);
    let mut render = vec![0.0f32; sr];
    render.extend(&reply);
    let len = (render.len() + sr) / FRAME_SAMPLES * FRAME_SAMPLES;
    render.resize(len, 0.0);
    let echo = echo_of(&render, 80, 0.6, len);
    // 8 s into the reply (the canceller has found the echo), 10 dB below it.
    let person_at = 9 * sr;
    let scale = (power(&echo[sr..sr + reply.len()]) / power(&person)).sqrt() as f32 * 0.316;
    let mut near = vec![0.0f32; len];
    for (i, &s) in person.iter().enumerate() {
        near[person_at + i] = s * scale;
    }
    let mut seed = 5;
    let mic: Vec<f32> = (0..len)
        .map(|i| echo[i] + near[i] + 0.002 * noise(&mut seed))
        .collect();

    let (reference, mut canceller) = echo::pair().unwrap();
    let cancelled = play_and_cancel(&reference, &mut canceller, &render, &mic, 0);
    let out = cancelled.out;

    // While both talk: the echo before the phrase is taken out...
    let before = sr * 5..person_at;
    let erle = 10.0 * (power(&mic[before.clone()]) / power(&out[before])).log10();
    assert!(erle >= 15.0, "echo only {erle:.1} dB quieter");
    // ...and what comes out over the phrase is mostly the person, at much their level
    // (78% of its energy; AEC3's default configuration kept 44%).
    let span = person_at..person_at + person.len();
    let kept = power(&out[span.clone()]) / power(&near[span]);
    assert!(
        kept > 0.6,
        "only {:.0}% of the person's speech energy kept while the reply plays",
        kept * 100.0
    );
    // Played sound is said to be taken out while the reply plays, and not a second after.
    let stats = canceller.stats();
    assert!(
        cancelled.over_echo[person_at / FRAME_SAMPLES - 1],
        "{stats:?}"
    );
    assert_eq!(cancelled.over_echo.last(), Some(&false), "{stats:?}");
}

/// `audio echo` on two recordings a user made at the same moment, the speaker's at 48 kHz:
/// it finds the delay, says how much echo it took out and what that cost, and writes the
/// microphone without the echo; on a microphone that never heard the speaker it says so.
#[test]
fn audio_echo_finds_the_delay_between_two_recordings_and_takes_the_echo_out() {
    let sr = SAMPLE_RATE as usize;
    let reply = speech(&[
        "en-us-05", "en-us-06", "en-us-07", "en-us-08", "en-us-09", "en-us-10",
    ]);
    let echo = echo_of(&reply, 100, 0.6, reply.len());
    let mut seed = 7;
    let mic: Vec<f32> = echo.iter().map(|&s| s + 0.003 * noise(&mut seed)).collect();
    let deaf: Vec<f32> = (0..reply.len()).map(|_| 0.003 * noise(&mut seed)).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let played = resample(&reply, SAMPLE_RATE, SPEAKER_RATE).unwrap();
    write_wav(&path("played.wav"), &played, SPEAKER_RATE).unwrap();
    write_wav(&path("heard.wav"), &mic, SAMPLE_RATE).unwrap();
    write_wav(&path("deaf.wav"), &deaf, SAMPLE_RATE).unwrap();
    let run = |heard: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_strawberry-spoke"))
            .args(["audio", "echo"])
            .arg(path("played.wav"))
            .arg(path(heard))
            .arg("-o")
            .arg(path("out.wav"))
            .env("STRAWBERRY_SPOKE__LOG__LEVEL", "warn")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let number = |text: &str, before: &str, after: &str| -> f64 {
        let from = text
            .find(before)
            .unwrap_or_else(|| panic!("no {before:?} in {text}"))
            + before.len();
        let len = text[from..].find(after).unwrap_or(0);
        text[from..from + len]
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{before:?} in {text}: {e}"))
    };

    let stdout = run("heard.wav");
    let delay = number(&stdout, "delay found: ", " ms");
    assert!(
        (70.0..=130.0).contains(&delay),
        "played 100 ms before heard: {stdout}"
    );
    // AEC3's own estimate, not the measured figure below: over 1 dB once it has locked on.
    assert!(number(&stdout, "(ERLE): ", " dB") > 1.0, "{stdout}");
    assert!(
        number(&stdout, "CPU: ", " µs per 10 ms block") > 0.0,
        "{stdout}"
    );
    let (out, _) = read_wav_16k(&path("out.wav")).unwrap();
    assert_eq!(out.len(), mic.len());
    let span = 5 * sr..reply.len();
    let erle = 10.0 * (power(&mic[span.clone()]) / power(&out[span])).log10();
    assert!(erle >= 15.0, "echo only {erle:.1} dB quieter in out.wav");

    let stdout = run("deaf.wav");
    assert!(stdout.contains("no delay found"), "{stdout}");
}
