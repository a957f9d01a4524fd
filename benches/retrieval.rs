//! Skill retrieval: does a spoken request find the function that serves it?
//!
//! A home of six spokes (`tests/retrieval/catalogue.txt`, 342 functions) and 109
//! requests phrased the way people talk (`tests/retrieval/utterances.tsv`), each with
//! the function it should find. Every function of every device ranks on one scale, as
//! `device.search_skills` and the prompt's top-k rank them, and the table gives recall@1,
//! recall@5 and MRR for the lexical ranker, the embedding alone and the hybrid
//! [`search::score`] uses, for the dev half (used to choose
//! [`search::LEXICAL_WEIGHT`]) and the held-out half (only scored). Then the cost:
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

use strawberry_spoke::skills::embed::{Semantic, cosine};
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
                confirm: false,
                model_callable: true,
                remote: true,
                file: PathBuf::new(),
                line: n + 1,
            });
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
    let started = Instant::now();
    let indexes: Vec<ClassIndex> = devices
        .iter()
        .map(|d| ClassIndex::build_with(&d.classes, Some(semantic.clone())))
        .collect();
    let index_time = started.elapsed();
    let mut names = Vec::new();
    let mut docs: Vec<Doc<'_>> = Vec::new();
    let mut vectors = Vec::new();
    for (device, index) in devices.iter().zip(&indexes) {
        for (ci, class) in device.classes.iter().enumerate() {
            for (fi, f) in class.functions.iter().enumerate() {
                names.push(format!("{}/{}.{}", device.name, class.name, f.name));
                docs.push(index.doc(ci, fi));
                vectors.push(semantic.embed_cached(&search::embedding_text(class, f)));
            }
        }
    }
    assert_eq!(
        semantic.computed() as usize,
        functions,
        "each text embedded once"
    );

    let halves = ["dev", "held-out"];
    let weights = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0];
    let mut lexical = [Metrics::default(); 2];
    let mut embedding = [Metrics::default(); 2];
    let mut hybrid = [Metrics::default(); 2];
    let mut sweep = vec![[Metrics::default(); 2]; weights.len()];
    let mut times = Vec::new();
    let mut misses = Vec::new();
    // Lexical scores for trying blends outside Rust.
    let dump = std::env::var_os("RETRIEVAL_DUMP")
        .map(|p| std::fs::File::create(p).unwrap_or_else(|e| panic!("{e}")));
    if let Some(p) = std::env::var_os("RETRIEVAL_DUMP") {
        let names_path = format!("{}.names", p.to_string_lossy());
        std::fs::write(names_path, names.join("\n")).ok();
    }
    for u in &utterances {
        let h = halves
            .iter()
            .position(|h| *h == u.half)
            .unwrap_or_else(|| panic!("unknown half {}", u.half));
        let lex = search::lexical_score(&docs, &u.text);
        if let Some(dump) = &dump {
            use std::io::Write;
            let mut f = dump;
            let line: Vec<String> = lex.iter().map(|v| format!("{v:.4}")).collect();
            writeln!(f, "{}\t{}", u.text, line.join(" ")).ok();
        }
        let started = Instant::now();
        let wanted = semantic.embed_query(&u.text);
        times.push(started.elapsed());
        let cosines: Vec<f32> = vectors.iter().map(|v| cosine(&wanted, v)).collect();
        let both = search::score(&docs, &u.text);
        lexical[h].add(rank(&names, &lex, &u.expected));
        embedding[h].add(rank(&names, &cosines, &u.expected));
        let r = rank(&names, &both, &u.expected);
        hybrid[h].add(r);
        if r.is_none_or(|r| r > 0) {
            let best = (0..both.len())
                .max_by(|a, b| both[*a].total_cmp(&both[*b]))
                .map_or("", |i| names[i].as_str());
            misses.push(format!(
                "  [{}] {:?}: {} at rank {}, first {best}",
                u.half,
                u.text,
                u.expected,
                r.map_or("none".into(), |r| (r + 1).to_string())
            ));
        }
        for (w, m) in weights.iter().zip(sweep.iter_mut()) {
            m[h].add(rank(
                &names,
                &search::hybrid(&lex, &cosines, *w),
                &u.expected,
            ));
        }
    }

    println!();
    println!("| method | half | n | recall@1 | recall@5 | MRR |");
    println!("|---|---|---|---|---|---|");
    for (label, m) in [
        ("lexical (BM25)", &lexical),
        ("embedding only", &embedding),
        ("hybrid", &hybrid),
    ] {
        for (h, half) in halves.iter().enumerate() {
            println!("| {label} | {half} | {} | {} |", m[h].n, m[h].row());
        }
    }
    println!();
    println!(
        "blend sweep (cosine + w x lexical/best; search::LEXICAL_WEIGHT = {}), dev half only:",
        search::LEXICAL_WEIGHT
    );
    for (w, m) in weights.iter().zip(&sweep) {
        println!("  w = {w:.1}: {}", m[0].row());
    }
    println!();
    println!("hybrid misses at rank 1:");
    for m in &misses {
        println!("{m}");
    }

    times.sort();
    println!();
    println!(
        "model load {:.0} ms; embedding the {functions} functions {:.0} ms ({:.1} ms each)",
        load.as_secs_f64() * 1e3,
        index_time.as_secs_f64() * 1e3,
        index_time.as_secs_f64() * 1e3 / functions as f64
    );
    println!(
        "embedding one request: median {:.2} ms, p95 {:.2} ms, max {:.2} ms",
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.95).as_secs_f64() * 1e3,
        percentile(&times, 1.0).as_secs_f64() * 1e3
    );
    let started = Instant::now();
    for u in &utterances {
        std::hint::black_box(search::score(&docs, &u.text));
    }
    println!(
        "a whole hybrid search over {functions} functions: {:.2} ms on average",
        started.elapsed().as_secs_f64() * 1e3 / utterances.len() as f64
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
