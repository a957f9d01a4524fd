//! Skill retrieval: does a spoken request find the function that serves it?
//!
//! A home of six spokes (`tests/retrieval/catalogue.txt`, 342 functions) and 109
//! requests phrased the way people talk (`tests/retrieval/utterances.tsv`), each with
//! the function it should find. Every function of every device ranks on one scale, as
//! `device.search_skills` and the prompt's top-k rank them, and the table gives recall@1,
//! recall@5 and MRR for the lexical ranker, the embedding alone and the hybrid
//! [`search::score`] uses, for the dev half (used to choose
//! [`search::LEXICAL_WEIGHT`]) and the held-out half (only scored), twice: with the
//! functions documented as most skill files are (summary, docstring, parameters) and
//! with their authors' `@request` lines too (the catalogue's `ask` lines). Then the cost:
//! model load time, time to embed one request (median and p95) and the extra memory of
//! the model (peak RSS of a child process that loads it and embeds everything, minus its
//! RSS before).
//!
//! Needs the model `tests/setup.sh` unpacks into target/stt-test/minilm (or
//! `RETRIEVAL_MODEL=DIR`). Run: `cargo bench --bench retrieval`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strawberry_spoke::embed::Semantic;
use strawberry_spoke::skills::search::{self, ClassIndex, Doc};
use strawberry_spoke::skills::{ClassDoc, Param, SkillFunction, ValueType};

struct Device {
    name: String,
    classes: Vec<ClassDoc>,
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/retrieval")
}

fn model_dir() -> PathBuf {
    std::env::var_os("RETRIEVAL_MODEL").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/stt-test/minilm"),
        PathBuf::from,
    )
}

fn catalogue() -> Vec<Device> {
    let path = data_dir().join("catalogue.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut devices: Vec<Device> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        let where_ = format!("{}:{}: {line}", path.display(), n + 1);
        let bad = || -> ! { panic!("{where_}") };
        if let Some(name) = line.strip_prefix("device ") {
            devices.push(Device {
                name: name.trim().to_string(),
                classes: Vec::new(),
            });
        } else if let Some(rest) = line.strip_prefix("class ") {
            let (name, summary) = rest.split_once('|').unwrap_or_else(|| bad());
            let device = devices.last_mut().unwrap_or_else(|| bad());
            device.classes.push(ClassDoc {
                name: name.trim().to_string(),
                summary: summary.trim().to_string(),
                description: String::new(),
                examples: Vec::new(),
                functions: Vec::new(),
            });
        } else if let Some(rest) = line.strip_prefix("fn ") {
            let mut fields = rest.split('|').map(str::trim);
            let signature = fields.next().unwrap_or_else(|| bad());
            let summary = fields.next().unwrap_or_else(|| bad()).to_string();
            let docstring = fields.next().unwrap_or("").to_string();
            let (name, params) = signature.split_once('(').unwrap_or_else(|| bad());
            let params = params.trim_end_matches(')');
            let class = devices
                .last_mut()
                .and_then(|d| d.classes.last_mut())
                .unwrap_or_else(|| bad());
            class.functions.push(SkillFunction {
                class: class.name.clone(),
                name: name.to_string(),
                params: params
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(|p| Param {
                        name: p.to_string(),
                        ty: ValueType::Any,
                        default: None,
                        description: String::new(),
                    })
                    .collect(),
                returns: ValueType::Unit,
                returns_doc: String::new(),
                summary,
                docstring,
                requests: Vec::new(),
                confirm: false,
                model_callable: true,
                remote: true,
                file: PathBuf::new(),
                line: n + 1,
            });
        } else if let Some(request) = line.strip_prefix("ask ") {
            let function = devices
                .last_mut()
                .and_then(|d| d.classes.last_mut())
                .and_then(|c| c.functions.last_mut())
                .unwrap_or_else(|| bad());
            function.requests.push(request.trim().to_string());
        } else if !line.is_empty() && !line.starts_with('#') {
            bad();
        }
    }
    devices
}

struct Utterance {
    half: String,
    text: String,
    expected: String,
}

fn utterances() -> Vec<Utterance> {
    let path = data_dir().join("utterances.tsv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let fields: Vec<&str> = l.split('\t').collect();
            assert_eq!(fields.len(), 3, "{}: {l}", path.display());
            Utterance {
                half: fields[0].to_string(),
                text: fields[1].to_string(),
                expected: fields[2].to_string(),
            }
        })
        .collect()
}

#[derive(Default, Clone, Copy)]
struct Metrics {
    at1: f32,
    at5: f32,
    mrr: f32,
    n: usize,
}

impl Metrics {
    fn add(&mut self, rank: Option<usize>) {
        self.n += 1;
        if let Some(rank) = rank {
            self.at1 += f32::from(u8::from(rank == 0));
            self.at5 += f32::from(u8::from(rank < 5));
            self.mrr += 1.0 / (rank + 1) as f32;
        }
    }

    fn row(&self) -> String {
        let n = self.n.max(1) as f32;
        format!(
            "{:.3} | {:.3} | {:.3}",
            self.at1 / n,
            self.at5 / n,
            self.mrr / n
        )
    }
}

/// The 0-based rank of `expected` in `scores` (ties count against it).
fn rank(names: &[String], scores: &[f32], expected: &str) -> Option<usize> {
    let at = names.iter().position(|n| n == expected)?;
    let own = scores[at];
    Some(
        scores
            .iter()
            .enumerate()
            .filter(|(i, s)| *i != at && **s >= own)
            .count(),
    )
}

fn percentile(sorted: &[Duration], p: f32) -> Duration {
    sorted[((sorted.len() - 1) as f32 * p).round() as usize]
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// In a child process: load the model, embed the catalogue and every request, and print
/// the RSS before and the peak after.
fn memory_child() {
    let devices = catalogue();
    let utterances = utterances();
    let before = status_kib("VmRSS:");
    let semantic = Arc::new(Semantic::load(&model_dir()).unwrap_or_else(|e| panic!("{e}")));
    let indexes: Vec<ClassIndex> = devices
        .iter()
        .map(|d| ClassIndex::build_with(&d.classes, Some(semantic.clone())))
        .collect();
    for u in &utterances {
        std::hint::black_box(semantic.embed_query(&u.text));
    }
    std::hint::black_box(&indexes);
    println!("{before} {}", status_kib("VmHWM:"));
}

const HALVES: [&str; 2] = ["dev", "held-out"];
const WEIGHTS: [f32; 8] = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0];

/// Scores of one way of documenting the catalogue, per half.
struct Evaluation {
    lexical: [Metrics; 2],
    embedding: [Metrics; 2],
    hybrid: [Metrics; 2],
    sweep: Vec<[Metrics; 2]>,
    /// The hybrid on the requests that no `ask` line says word for word.
    unseen: [Metrics; 2],
    misses: Vec<String>,
    /// Building the indexes (embedding what the cache does not hold).
    index_time: Duration,
    /// All the hybrid searches, one per request.
    search_time: Duration,
}

/// A request's words, lowercased, without punctuation: to tell which requests an
/// `ask` line says word for word.
fn plain(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || c.is_whitespace() || *c == '\'')
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Ranks every function of `devices` for every request, on one scale, as the spoke's
/// search does.
fn evaluate(devices: &[Device], semantic: &Arc<Semantic>, utterances: &[Utterance]) -> Evaluation {
    let asked: std::collections::HashSet<String> = devices
        .iter()
        .flat_map(|d| &d.classes)
        .flat_map(|c| &c.functions)
        .flat_map(|f| &f.requests)
        .map(|r| plain(r))
        .collect();
    let started = Instant::now();
    let indexes: Vec<ClassIndex> = devices
        .iter()
        .map(|d| ClassIndex::build_with(&d.classes, Some(semantic.clone())))
        .collect();
    let index_time = started.elapsed();
    let mut names = Vec::new();
    let mut docs: Vec<Doc<'_>> = Vec::new();
    for (device, index) in devices.iter().zip(&indexes) {
        for (ci, class) in device.classes.iter().enumerate() {
            for (fi, f) in class.functions.iter().enumerate() {
                names.push(format!("{}/{}.{}", device.name, class.name, f.name));
                docs.push(index.doc(ci, fi));
            }
        }
    }
    let mut e = Evaluation {
        lexical: [Metrics::default(); 2],
        embedding: [Metrics::default(); 2],
        hybrid: [Metrics::default(); 2],
        sweep: vec![[Metrics::default(); 2]; WEIGHTS.len()],
        unseen: [Metrics::default(); 2],
        misses: Vec::new(),
        index_time,
        search_time: Duration::ZERO,
    };
    for u in utterances {
        let h = HALVES
            .iter()
            .position(|h| *h == u.half)
            .unwrap_or_else(|| panic!("unknown half {}", u.half));
        let lex = search::lexical_score(&docs, &u.text);
        let cosines = search::semantic_score(&docs, &u.text).expect("embedded with one model");
        let started = Instant::now();
        let both = search::score(&docs, &u.text);
        e.search_time += started.elapsed();
        e.lexical[h].add(rank(&names, &lex, &u.expected));
        e.embedding[h].add(rank(&names, &cosines, &u.expected));
        let r = rank(&names, &both, &u.expected);
        e.hybrid[h].add(r);
        if !asked.contains(&plain(&u.text)) {
            e.unseen[h].add(r);
        }
        if r.is_none_or(|r| r > 0) {
            let best = (0..both.len())
                .max_by(|a, b| both[*a].total_cmp(&both[*b]))
                .map_or("", |i| names[i].as_str());
            e.misses.push(format!(
                "  [{}] {:?}: {} at rank {}, first {best}",
                u.half,
                u.text,
                u.expected,
                r.map_or("none".into(), |r| (r + 1).to_string())
            ));
        }
        for (w, m) in WEIGHTS.iter().zip(e.sweep.iter_mut()) {
            m[h].add(rank(
                &names,
                &search::hybrid(&lex, &cosines, *w),
                &u.expected,
            ));
        }
    }
    e
}

fn main() {
    if std::env::var_os("RETRIEVAL_MEMORY_CHILD").is_some() {
        memory_child();
        return;
    }
    let devices = catalogue();
    let utterances = utterances();
    let functions: usize = devices
        .iter()
        .flat_map(|d| &d.classes)
        .map(|c| c.functions.len())
        .sum();
    println!(
        "catalogue: {functions} functions on {} devices; {} requests",
        devices.len(),
        utterances.len()
    );
    // Every request names a function that exists (a typo would only read as a miss).
    let known: std::collections::HashSet<String> = devices
        .iter()
        .flat_map(|d| {
            d.classes.iter().flat_map(move |c| {
                c.functions
                    .iter()
                    .map(move |f| format!("{}/{}.{}", d.name, c.name, f.name))
            })
        })
        .collect();
    let unknown: Vec<&str> = utterances
        .iter()
        .map(|u| u.expected.as_str())
        .filter(|e| !known.contains(*e))
        .collect();
    assert!(
        unknown.is_empty(),
        "requests expect functions not in the catalogue: {unknown:?}"
    );
    // `cargo test --all-targets` runs this file too: the data check is its test.
    if !std::env::args().any(|a| a == "--bench") {
        println!("retrieval benchmark: data checked; run it with `cargo bench --bench retrieval`");
        return;
    }

    let started = Instant::now();
    let semantic = Arc::new(Semantic::load(&model_dir()).unwrap_or_else(|e| panic!("{e}")));
    let load = started.elapsed();
    let requests: usize = devices
        .iter()
        .flat_map(|d| &d.classes)
        .flat_map(|c| &c.functions)
        .map(|f| f.requests.len())
        .sum();
    // The same home documented two ways: as most skill files are today, and with the
    // authors' `@request` lines (written without seeing the requests scored here).
    let bare: Vec<Device> = devices
        .iter()
        .map(|d| Device {
            name: d.name.clone(),
            classes: d
                .classes
                .iter()
                .map(|c| {
                    let mut c = c.clone();
                    c.functions.iter_mut().for_each(|f| f.requests.clear());
                    c
                })
                .collect(),
        })
        .collect();
    let documented = evaluate(&bare, &semantic, &utterances);
    let index_time = documented.index_time;
    assert_eq!(
        semantic.computed() as usize,
        functions,
        "each text embedded once"
    );
    let with_requests = evaluate(&devices, &semantic, &utterances);

    println!();
    println!("| documentation | method | half | n | recall@1 | recall@5 | MRR |");
    println!("|---|---|---|---|---|---|---|");
    for (label, e) in [
        ("without @request", &documented),
        ("with @request", &with_requests),
    ] {
        for (method, m) in [
            ("lexical (BM25)", &e.lexical),
            ("embedding only", &e.embedding),
            ("hybrid", &e.hybrid),
        ] {
            for (h, half) in HALVES.iter().enumerate() {
                println!(
                    "| {label} | {method} | {half} | {} | {} |",
                    m[h].n,
                    m[h].row()
                );
            }
        }
    }
    for (h, half) in HALVES.iter().enumerate() {
        let m = &with_requests.unseen[h];
        println!(
            "| with @request, only requests no `ask` line says word for word | hybrid | {half} | {} | {} |",
            m.n,
            m.row()
        );
    }
    println!();
    println!(
        "blend sweep (similarity + w x lexical/best; search::LEXICAL_WEIGHT = {}), dev half only:",
        search::LEXICAL_WEIGHT
    );
    for (i, w) in WEIGHTS.iter().enumerate() {
        println!(
            "  w = {w:.1}: without @request {} | with @request {}",
            documented.sweep[i][0].row(),
            with_requests.sweep[i][0].row()
        );
    }
    for (label, e) in [
        ("without @request", &documented),
        ("with @request", &with_requests),
    ] {
        println!();
        println!("hybrid misses at rank 1, {label}:");
        for m in &e.misses {
            println!("{m}");
        }
    }

    let mut times = Vec::new();
    for u in &utterances {
        let started = Instant::now();
        std::hint::black_box(semantic.embed_query(&u.text));
        times.push(started.elapsed());
    }
    times.sort();
    println!();
    println!(
        "model load {:.0} ms; embedding the {functions} functions' documentation {:.0} ms ({:.1} ms each); {requests} @request lines {:.0} ms ({:.1} ms each)",
        load.as_secs_f64() * 1e3,
        index_time.as_secs_f64() * 1e3,
        index_time.as_secs_f64() * 1e3 / functions as f64,
        with_requests.index_time.as_secs_f64() * 1e3,
        with_requests.index_time.as_secs_f64() * 1e3 / requests.max(1) as f64
    );
    println!(
        "embedding one request: median {:.2} ms, p95 {:.2} ms, max {:.2} ms",
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.95).as_secs_f64() * 1e3,
        percentile(&times, 1.0).as_secs_f64() * 1e3
    );
    println!(
        "a whole hybrid search over {functions} functions: {:.2} ms on average without @request lines, {:.2} ms with",
        documented.search_time.as_secs_f64() * 1e3 / utterances.len() as f64,
        with_requests.search_time.as_secs_f64() * 1e3 / utterances.len() as f64
    );

    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(exe)
        .env("RETRIEVAL_MEMORY_CHILD", "1")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let kib: Vec<u64> = text
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    match kib.as_slice() {
        [before, peak] => println!(
            "extra memory of the model: peak RSS {:.1} MB over {:.1} MB before loading (+{:.1} MB)",
            *peak as f64 / 1024.0,
            *before as f64 / 1024.0,
            peak.saturating_sub(*before) as f64 / 1024.0
        ),
        _ => println!(
            "memory child failed: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}
