//! The echo canceller through its public ends: a speaker's callback handing what it
//! plays (48 kHz, in callback-sized buffers, with the first buffers ahead as ALSA
//! fills its buffer) and microphone frames that hear it through a room: delayed,
//! reverberated, attenuated, plus a person speaking and noise. Speech is the espeak-ng
//! recordings `tests/setup.sh` made; the room is `tests/support/room.rs`.

use std::path::Path;

use crate::support::room::{CALLBACK, SPEAKER_RATE, echo_of, noise, play_and_cancel, power};
use strawberry_spoke::audio::echo::{self, EchoHealth};
use strawberry_spoke::audio::wav::read_wav_16k;
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
    let (out, _) = play_and_cancel(&reference, &mut canceller, &render, &mic, 60);

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

#[test]
fn played_audio_the_capture_side_never_collects_is_reported_lost() {
    let (reference, mut canceller) = echo::pair().unwrap();
    for _ in 0..2_000 {
        reference.played(vec![0.1; CALLBACK], SPEAKER_RATE);
    }
    let mut frame = Frame {
        start: 0,
        samples: vec![0.0; FRAME_SAMPLES],
    };
    canceller.process(&mut frame).unwrap();
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
    let (out, _) = play_and_cancel(&reference, &mut canceller, &render, &mic, 0);

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
}
