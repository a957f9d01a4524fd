//! Barge-in through the real daemon (issue 26, part 2): how often "hey strawberry" said
//! while the spoke talks interrupts it, and whether its own replies ever wake it or reach
//! the model, with the echo canceller on and off in the same run.
//!
//! The spoke is `tests/support/kitchen.rs`'s: the real `run` daemon (espeak-ng replies,
//! the bundled wake word each setup names, tiny.en), its speaker heard by its own microphone through
//! `tests/support/live_room.rs` at real-time pace (20 ms of sound's and card's delay
//! beyond the speaker's pipe, a reverberant tail, the echo about 3 dB louder at the
//! microphone than the person). Each barge-in trial says "hey strawberry, what is the
//! weather like tomorrow" (espeak-ng en-gb-x-rp_m1) 3 s into a reply of 8-12 s; the
//! replies-alone run asks for a reply, lets it play out (and the follow-up window after
//! a question close), and counts wakes and requests beyond the ones the person caused.
//! One reply of four says "hey strawberry" itself. The stop trials set a 2 s timer by
//! voice and say "stop" (espeak-ng en-us) 1.5 s into its ring, which otherwise rings
//! for 12 s; with the canceller, once with the stop word (`wake.stop_word`, the default)
//! and once with Whisper's transcript alone.
//!
//! `cargo bench --bench kitchen` (after `tests/setup.sh`; `--profile dev` runs the
//! test suite's debug daemon, built in seconds when the tests were). `KITCHEN_BENCH_TRIALS`
//! (default 10) barge-in trials and `KITCHEN_BENCH_REPLIES` (default 50) replies alone
//! per configuration; `KITCHEN_BENCH_SETUPS` (parts of the setups' names separated by
//! `;`, as the names have commas: e.g. `canceller on`, `ring` for the stop trials alone,
//! `ring, canceller and stop word on` for the first of them) runs only the setups whose
//! name contains one; with `KITCHEN_BENCH_LOGS` (a directory) each setup's daemon log is
//! kept there, for a look at what it heard. It runs in real time: about an hour with the
//! defaults. Under `cargo test` this target only checks that its inputs exist.

#[path = "../tests/support/mod.rs"]
#[allow(dead_code, reason = "a benchmark uses a few of the test helpers")]
mod support;

use support::kitchen::{self, Kitchen};
use support::mouth::wake_phrase;
use support::stt::cache_dir;

/// What is compared: (label, config appended to the spoke's `[audio]`, whether the
/// replies-alone run is made for it).
const SETUPS: [(&str, &str, bool); 6] = [
    (
        "neural word at medium (default), canceller on",
        "echo_cancel = true\n[wake]\nbundled = \"neural\"",
        true,
    ),
    (
        "neural word at medium (default), canceller off",
        "echo_cancel = false\n[wake]\nbundled = \"neural\"",
        true,
    ),
    (
        "reference word, canceller on",
        "echo_cancel = true\n[wake]\nbundled = \"reference\"",
        true,
    ),
    (
        "reference word, canceller off",
        "echo_cancel = false\n[wake]\nbundled = \"reference\"",
        true,
    ),
    (
        "neural word at high, canceller on",
        "echo_cancel = true\n[wake]\nbundled = \"neural\"\nsensitivity = \"high\"",
        false,
    ),
    (
        "neural word at high, canceller off",
        "echo_cancel = false\n[wake]\nbundled = \"neural\"\nsensitivity = \"high\"",
        false,
    ),
];

/// How long a timer rings when nobody stops it.
const RING_MS: u64 = 12_000;

fn count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Keeps the daemon's log of the setup `label` in `KITCHEN_BENCH_LOGS`, if set.
fn keep_log(kitchen: &Kitchen, label: &str) {
    if let Ok(dir) = std::env::var("KITCHEN_BENCH_LOGS") {
        let name: String = label
            .chars()
            .map(|c| if c.is_alphanumeric() { c } else { '-' })
            .collect();
        let path = std::path::Path::new(&dir).join(format!("{name}.log"));
        if let Err(error) = std::fs::write(&path, kitchen.spoke.log()) {
            eprintln!("{}: {error}", path.display());
        }
    }
}

fn main() {
    let phrase = wake_phrase(&cache_dir(), "en-gb-x-rp_m1");
    assert!(
        phrase.is_file(),
        "{} (run tests/setup.sh)",
        phrase.display()
    );
    if !std::env::args().any(|a| a == "--bench") {
        println!("kitchen benchmark: run it with `cargo bench --bench kitchen`");
        return;
    }
    let trials = count("KITCHEN_BENCH_TRIALS", 10);
    let replies = count("KITCHEN_BENCH_REPLIES", 50);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    println!(
        "| setup | interrupted by the wake word | echo at the mic against the phrase | own replies | woke on them | reached the model |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    let wanted = std::env::var("KITCHEN_BENCH_SETUPS").unwrap_or_default();
    let chosen = |label: &str| wanted.is_empty() || wanted.split(';').any(|w| label.contains(w));
    for (label, extra, alone) in SETUPS.into_iter().filter(|(label, ..)| chosen(label)) {
        let kitchen = rt.block_on(Kitchen::start(2 * trials + replies + 2, extra));
        let hits = kitchen.barge_in(trials);
        let interrupted = hits.iter().filter(|&&h| h).count();
        let echo = kitchen.room.heard().level_db() - kitchen.phrase_db();
        let (woke, asked) = if alone {
            let (wakes, asked) = (kitchen.wakes(), kitchen.hub.requests().len());
            kitchen.converse(replies);
            (
                (kitchen.wakes() - wakes)
                    .saturating_sub(replies)
                    .to_string(),
                (kitchen.hub.requests().len() - asked)
                    .saturating_sub(replies)
                    .to_string(),
            )
        } else {
            ("-".into(), "-".into())
        };
        let shown = if alone {
            replies.to_string()
        } else {
            "-".into()
        };
        println!(
            "| {label} | {interrupted} of {trials} | {echo:+.1} dB | {shown} | {woke} | {asked} |"
        );
        keep_log(&kitchen, label);
        kitchen.daemon.stop();
    }
    println!();
    println!("| setup | \"stop\" said 1.5 s into a ring stopped it | median ring |");
    println!("| --- | --- | --- |");
    let rings = [
        ("ring, canceller and stop word on", "echo_cancel = true"),
        (
            "ring, canceller on, stop word off",
            "echo_cancel = true\n[wake]\nstop_word = false",
        ),
        ("ring, canceller off", "echo_cancel = false"),
    ];
    for (label, config) in rings.into_iter().filter(|(label, _)| chosen(label)) {
        let kitchen = rt.block_on(Kitchen::timers(trials, RING_MS, config));
        let mut rang = kitchen.stop_rings(trials);
        rang.sort();
        println!(
            "| {label} | {} of {trials} | {:.1} s |",
            kitchen::stopped(&rang, RING_MS),
            rang[rang.len() / 2].as_secs_f64()
        );
        keep_log(&kitchen, label);
        kitchen.daemon.stop();
    }
}
