//! Speech-to-text test material: the recordings and model `tests/setup.sh` fetched, the
//! ggml model converted from it with the real `model import-ct2` command (cached), and
//! word error rate scoring. Shared by `tests/stt.rs` and `benches/stt.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Where `tests/setup.sh` leaves its material.
pub fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/stt-test")
}

/// The faster-whisper (CTranslate2) tiny.en model directory.
pub fn ct2_dir() -> PathBuf {
    let dir = cache_dir().join("ct2");
    assert!(
        dir.join("model.bin").is_file(),
        "{} is missing: run tests/setup.sh first (the README's test line does)",
        dir.display()
    );
    dir
}

/// The files in `dir` whose names end in `suffix` (e.g. `.wav`), sorted by name.
pub fn wavs(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}: run tests/setup.sh first (the README's test line does)",
                dir.display()
            )
        })
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    files
}

/// One recording and what was said in it.
#[derive(Debug, Clone)]
pub struct Clip {
    pub wav: PathBuf,
    pub text: String,
}

/// The 16 kHz mono recordings (`other/` holds clips in other formats).
pub fn clips() -> Vec<Clip> {
    clips_in(&cache_dir().join("wav"))
}

/// The clips in one folder: every `NAME.wav` with its `NAME.txt`, sorted by name.
pub fn clips_in(dir: &Path) -> Vec<Clip> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run tests/setup.sh first (the README's test line does)",
            dir.display()
        )
    });
    let mut clips: Vec<Clip> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wav"))
        .map(|wav| {
            let text = std::fs::read_to_string(wav.with_extension("txt"))
                .unwrap_or_else(|e| panic!("{}: {e}", wav.display()));
            Clip {
                wav,
                text: text.trim().to_string(),
            }
        })
        .collect();
    clips.sort_by(|a, b| a.wav.cmp(&b.wav));
    assert!(!clips.is_empty(), "no recordings in {}", dir.display());
    clips
}

static CONVERT: Mutex<()> = Mutex::new(());

/// The tiny.en model as ggml (`q8_0` or `f16`), converted with the real
/// `strawberry-spoke model import-ct2` and cached next to the CTranslate2 model.
pub fn ggml_model(quantize: &str) -> PathBuf {
    import(&ct2_dir(), "tiny.en", quantize)
}

/// The multilingual Whisper base model (`tests/setup.sh` fetches it) as ggml.
pub fn base_model(quantize: &str) -> PathBuf {
    let dir = cache_dir().join("base-ct2");
    assert!(
        dir.join("model.bin").is_file(),
        "{} is missing: run tests/setup.sh first (the README's test line does)",
        dir.display()
    );
    import(&dir, "base", quantize)
}

/// The recordings in another language (`de`, `fr`, `es`).
pub fn lang_clips(language: &str) -> Vec<Clip> {
    clips_in(&cache_dir().join("lang").join(language))
}

/// `ct2` converted to `ggml-NAME-QUANTIZE.bin` with the real `model import-ct2`. The
/// cache is redone whenever the binary is newer than it (the converter may have changed).
fn import(ct2: &Path, name: &str, quantize: &str) -> PathBuf {
    let _one_at_a_time = CONVERT.lock().unwrap_or_else(|e| e.into_inner());
    let bin = Path::new(env!("CARGO_BIN_EXE_strawberry-spoke"));
    let out = cache_dir().join(format!("ggml-{name}-{quantize}.bin"));
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let fresh = match (modified(&out), modified(bin)) {
        (Some(model), Some(binary)) => model > binary,
        _ => false,
    };
    if !fresh {
        let output = Command::new(bin)
            .args(["model", "import-ct2"])
            .arg(ct2)
            .arg(&out)
            .args(["--quantize", quantize])
            .output()
            .expect("run strawberry-spoke");
        assert!(
            output.status.success(),
            "import-ct2 failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    out
}

/// Lower case, punctuation dropped, `%` as "percent", digits as words: what is left
/// is what was said, so `Set the volume to 40%.` matches `set the volume to forty percent`.
pub fn normalise(text: &str) -> Vec<String> {
    let mut spaced = String::new();
    for c in text.chars() {
        match c {
            '%' => spaced.push_str(" percent "),
            '-' | '/' => spaced.push(' '),
            c if c.is_alphanumeric() || c.is_whitespace() => spaced.extend(c.to_lowercase()),
            _ => {}
        }
    }
    spaced
        .split_whitespace()
        .flat_map(|w| match w.parse::<u64>() {
            Ok(n) => number_words(n),
            Err(_) => vec![w.to_string()],
        })
        .collect()
}

fn number_words(n: u64) -> Vec<String> {
    const ONES: [&str; 20] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ];
    const TENS: [&str; 10] = [
        "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    ];
    let mut words = Vec::new();
    let mut push = |w: &str| words.push(w.to_string());
    let below_thousand = |n: u64, push: &mut dyn FnMut(&str)| {
        if n >= 100 {
            push(ONES[(n / 100) as usize]);
            push("hundred");
        }
        let rest = n % 100;
        if rest >= 20 {
            push(TENS[(rest / 10) as usize]);
            if !rest.is_multiple_of(10) {
                push(ONES[(rest % 10) as usize]);
            }
        } else if rest > 0 || n == 0 {
            push(ONES[rest as usize]);
        }
    };
    if n >= 1_000_000 {
        push(&n.to_string());
    } else {
        if n >= 1000 {
            below_thousand(n / 1000, &mut push);
            push("thousand");
        }
        if n < 1000 || !n.is_multiple_of(1000) {
            below_thousand(n % 1000, &mut push);
        }
    }
    words
}

/// Word-level edit distance (substitutions + insertions + deletions).
pub fn word_errors(reference: &[String], hypothesis: &[String]) -> usize {
    let mut prev: Vec<usize> = (0..=hypothesis.len()).collect();
    for (i, r) in reference.iter().enumerate() {
        let mut row = vec![i + 1; hypothesis.len() + 1];
        for (j, h) in hypothesis.iter().enumerate() {
            let substitution = prev[j] + usize::from(r != h);
            row[j + 1] = substitution.min(prev[j + 1] + 1).min(row[j] + 1);
        }
        prev = row;
    }
    prev[hypothesis.len()]
}

/// Word error rate of a whole set: total edits over total reference words.
pub fn word_error_rate<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> f64 {
    let (mut errors, mut words) = (0usize, 0usize);
    for (reference, hypothesis) in pairs {
        let reference = normalise(reference);
        errors += word_errors(&reference, &normalise(hypothesis));
        words += reference.len();
    }
    errors as f64 / words.max(1) as f64
}

/// The RMS of the sound in `samples`, not of its pauses: over the 20 ms frames within
/// 30 dB of the loudest.
pub fn speech_rms(samples: &[f32]) -> f32 {
    let frames: Vec<f32> = samples
        .chunks(320)
        .map(|f| (f.iter().map(|s| s * s).sum::<f32>() / f.len() as f32).sqrt())
        .collect();
    let loudest = frames.iter().copied().fold(0.0, f32::max);
    let loud: Vec<f32> = frames
        .into_iter()
        .filter(|f| *f >= loudest * 0.0316)
        .collect();
    (loud.iter().map(|f| f * f).sum::<f32>() / loud.len().max(1) as f32).sqrt()
}
