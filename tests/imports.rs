//! No import circles between the crate's files: a file that imports another is never
//! imported by it, directly or through others (docs/architecture.md, "Module map").
//!
//! A circle means neither file can be understood, tested or moved without the other,
//! and it is how one-idea-per-file modules quietly grow back into one. `cargo modules`
//! would show it too, but it is a large install for one question; this reads the
//! sources as text, which is enough for a crate that imports with `use` and writes
//! paths as `crate::`, `super::`, `self::` or a child module's name.
//!
//! What counts: every `use` and every path in code (not comments, not `#[cfg(test)]`
//! modules). A module's own file naming its submodules (`mod x;`, `pub use x::Y`) is
//! how a module is made of its parts, so edges from a module to its descendants do not
//! count; a part reaching back up to its parent does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path such as `["host", "schedule"]` (the crate root is empty).
type ModPath = Vec<String>;

fn module_files(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut files = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(src).unwrap();
            if path.is_dir() {
                // The sandbox guest is a crate of its own.
                if rel != Path::new("guest") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || rel == Path::new("main.rs") {
                continue;
            }
            let mut parts: ModPath = rel
                .with_extension("")
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            files.insert(parts, path);
        }
    }
    files
}

/// The file's code: comments, strings and its unit-test module left out.
fn code(text: &str) -> String {
    let text = text
        .find("#[cfg(test)]\nmod tests {")
        .map_or(text, |at| &text[..at]);
    let mut out = String::new();
    for line in text.lines() {
        let line = line.split("//").next().unwrap_or("");
        let mut in_string = false;
        for c in line.chars() {
            if c == '"' {
                in_string = !in_string;
            } else if !in_string {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// Every path a file names: `use` trees expanded, plus `a::b::c` runs in code.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let boundary = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_alphanumeric() && c != '_');
        let tail = &rest[at + 4..];
        let Some(end) = tail.find(';') else { break };
        if boundary {
            expand(&tail[..end], &mut Vec::new(), &mut found);
        }
        rest = &tail[end..];
    }
    let mut current = String::new();
    for c in code.chars().chain(std::iter::once(' ')) {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            current.push(c);
        } else {
            if current.contains("::") {
                found.push(
                    current
                        .split("::")
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect(),
                );
            }
            current.clear();
        }
    }
    found
}

/// Expands a `use` tree (`a::{b, c::{d}}`) into whole paths.
fn expand(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let depth = prefix.len();
        prefix.extend(head);
        let mut level = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => level += 1,
                '}' => level -= 1,
                ',' if level == 0 => {
                    expand(&inner[start..i], prefix, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&inner[start..], prefix, out);
        prefix.truncate(depth);
    } else if !tree.is_empty() {
        let tree = tree.split(" as ").next().unwrap_or(tree);
        let mut path = prefix.clone();
        // `a::{self, b}`: `self` is `a` itself.
        let inside_group = !prefix.is_empty();
        path.extend(
            tree.split("::")
                .map(str::trim)
                .filter(|s| !(s.is_empty() || inside_group && *s == "self"))
                .map(str::to_string),
        );
        out.push(path);
    }
}

/// The module file a path reaches, seen from module `at`; `None` for other crates.
fn resolve(at: &ModPath, path: &[String], files: &BTreeMap<ModPath, PathBuf>) -> Option<ModPath> {
    let (mut base, mut rest) = match path.first()?.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (at.clone(), &path[1..]),
        "super" => {
            let mut base = at.clone();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
            (base, rest)
        }
        child => {
            let mut base = at.clone();
            base.push(child.to_string());
            if !files.contains_key(&base) {
                return None;
            }
            (base, &path[1..])
        }
    };
    while let Some(next) = rest.first() {
        let mut deeper = base.clone();
        deeper.push(next.clone());
        if !files.contains_key(&deeper) {
            break;
        }
        base = deeper;
        rest = &rest[1..];
    }
    files.contains_key(&base).then_some(base)
}

fn render(m: &ModPath) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// Which module files each module file imports (its own descendants left out).
fn crate_edges() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = module_files(&src);
    assert!(files.len() > 50, "found only {} files in src/", files.len());
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for path in paths(&code(&text)) {
            if let Some(to) = resolve(module, &path, &files)
                && to != *module
                && !to.starts_with(module)
            {
                edges.entry(module.clone()).or_default().insert(to);
            }
        }
    }
    edges
}

/// Parts are made from settings, never from the configuration: only the edges that
/// build parts (`app`, the commands, the daemon's reload loop) read it
/// (docs/architecture.md, "From configuration to parts").
#[test]
fn only_the_edges_read_the_configuration() {
    let config = vec!["config".to_string()];
    let edges = crate_edges();
    let readers: Vec<String> = edges
        .iter()
        .filter(|(_, to)| to.iter().any(|t| t.starts_with(&config)))
        .map(|(from, _)| render(from))
        .filter(|from| {
            let edge =
                from == "app" || from == "daemon" || from == "cli" || from.starts_with("cli::");
            !(edge || from.starts_with("config"))
        })
        .collect();
    assert!(
        readers.is_empty(),
        "parts that read the configuration instead of their settings: {readers:?}"
    );
}

#[test]
fn no_file_imports_one_that_imports_it_back() {
    let edges = crate_edges();

    // Tarjan's strongly connected components: each one larger than a file is a circle.
    struct Walk<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<ModPath, usize>,
        low: BTreeMap<ModPath, usize>,
        stack: Vec<ModPath>,
        on_stack: BTreeSet<ModPath>,
        circles: Vec<Vec<String>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: &ModPath) {
            let n = self.index.len();
            self.index.insert(v.clone(), n);
            self.low.insert(v.clone(), n);
            self.stack.push(v.clone());
            self.on_stack.insert(v.clone());
            let empty = BTreeSet::new();
            for w in self.edges.get(v).unwrap_or(&empty).clone() {
                if !self.index.contains_key(&w) {
                    self.visit(&w);
                    let low = self.low[v].min(self.low[&w]);
                    self.low.insert(v.clone(), low);
                } else if self.on_stack.contains(&w) {
                    let low = self.low[v].min(self.index[&w]);
                    self.low.insert(v.clone(), low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(&w);
                    let done = w == *v;
                    component.push(render(&w));
                    if done {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.circles.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        circles: Vec::new(),
    };
    for module in edges.keys() {
        if !walk.index.contains_key(module) {
            walk.visit(module);
        }
    }
    let report: Vec<String> = walk
        .circles
        .iter()
        .map(|c| {
            let inside: Vec<String> = c
                .iter()
                .flat_map(|from| {
                    let from_path: ModPath = if from == "crate" {
                        Vec::new()
                    } else {
                        from.split("::").map(str::to_string).collect()
                    };
                    edges
                        .get(&from_path)
                        .into_iter()
                        .flatten()
                        .filter(|to| c.contains(&render(to)))
                        .map(move |to| format!("{from} -> {}", render(to)))
                })
                .collect();
            inside.join(", ")
        })
        .collect();
    assert!(
        report.is_empty(),
        "import circles between files:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_check_sees_a_circle() {
    let files: BTreeMap<ModPath, PathBuf> = [
        vec![],
        vec!["a".to_string()],
        vec!["a".to_string(), "b".to_string()],
    ]
    .into_iter()
    .map(|m| (m, PathBuf::new()))
    .collect();
    let a = vec!["a".to_string()];
    let b = vec!["a".to_string(), "b".to_string()];
    let uses = paths(&code(
        "use super::{x, b::Thing};\nfn f() { crate::a::b::g(); } // crate::c::d\n",
    ));
    let reached: BTreeSet<ModPath> = uses.iter().filter_map(|p| resolve(&b, p, &files)).collect();
    assert!(reached.contains(&a), "{uses:?}");
    assert!(reached.contains(&b), "{uses:?}");
    let relative = paths(&code("use b::Thing as Other;\n"));
    assert_eq!(resolve(&a, &relative[0], &files), Some(b));
}
