//! Ranking skill functions for a free-text query.
//!
//! The model searches with the words of the user's request ("play a song", "how warm
//! is it"), which rarely match function names exactly, so this is a small relevance
//! ranker rather than a substring filter: BM25 over weighted fields (names weigh most,
//! then summaries, then the rest), light stemming, and typo tolerance by edit distance.

use std::collections::{HashMap, HashSet};

use super::{Example, SkillClass, SkillFunction, edit_distance};

/// What the ranker reads of a skill class. Loaded classes implement it, and so do the
/// descriptions of other spokes' skills, so local and remote skills rank on one scale.
pub trait ClassText {
    /// The class name, e.g. `VolumeSkill`.
    fn name(&self) -> &str;
    /// The class summary.
    fn summary(&self) -> &str;
    /// The rest of the class prose.
    fn description(&self) -> &str;
    /// Example requests with the code that serves them.
    fn examples(&self) -> &[Example];
    /// The functions to rank.
    fn functions(&self) -> &[SkillFunction];
}

/// Implements [`ClassText`] for a struct with `name`, `summary`, `description`,
/// `examples` and `functions` fields (local and remote skill classes).
macro_rules! impl_class_text {
    ($ty:ty) => {
        impl $crate::skills::search::ClassText for $ty {
            fn name(&self) -> &str {
                &self.name
            }
            fn summary(&self) -> &str {
                &self.summary
            }
            fn description(&self) -> &str {
                &self.description
            }
            fn examples(&self) -> &[$crate::skills::Example] {
                &self.examples
            }
            fn functions(&self) -> &[$crate::skills::SkillFunction] {
                &self.functions
            }
        }
    };
}
pub(crate) use impl_class_text;

impl_class_text!(SkillClass);

/// Ranks the functions of `classes` for `query` on a one-off index, best first, at most
/// `limit` (for sets that change between searches, such as skills across devices).
pub fn rank<'a, C: ClassText>(classes: &'a [C], query: &str, limit: usize) -> Vec<SearchHit<'a>> {
    Index::build(classes).search(classes, query, limit)
}

/// One search result: a function and how well it matched (higher is better).
#[derive(Debug, Clone, Copy)]
pub struct SearchHit<'a> {
    /// The function found.
    pub function: &'a SkillFunction,
    /// Its relevance; 0 for an empty query.
    pub score: f32,
}

const CLASS_NAME: f32 = 3.0;
const FUNCTION_NAME: f32 = 3.0;
const SUMMARY: f32 = 2.0;
const PARAM_NAME: f32 = 1.0;
const DOCSTRING: f32 = 1.0;
const CLASS_SUMMARY: f32 = 1.0;
/// Example requests that use the function are strong hints; the others, weak ones.
const EXAMPLE_USING: f32 = 1.0;
const EXAMPLE_OTHER: f32 = 0.3;
const MINOR: f32 = 0.5;

const K1: f32 = 1.2;
const B: f32 = 0.5;

const STOPWORDS: [&str; 34] = [
    "a", "an", "the", "of", "to", "in", "on", "at", "for", "and", "or", "is", "are", "be", "it",
    "its", "this", "that", "with", "by", "from", "as", "what", "how", "me", "my", "you", "your",
    "do", "does", "can", "please", "if", "into",
];

/// The searchable text of every function of a registry.
#[derive(Debug, Default)]
pub(crate) struct Index {
    docs: Vec<Doc>,
    /// How many documents contain each term.
    df: HashMap<String, usize>,
    avg_len: f32,
}

#[derive(Debug)]
struct Doc {
    class: usize,
    function: usize,
    qualified: String,
    /// Field-weighted term frequencies.
    terms: HashMap<String, f32>,
    len: f32,
}

impl Index {
    /// Indexes every function of `classes`.
    pub(crate) fn build<C: ClassText>(classes: &[C]) -> Index {
        let mut docs = Vec::new();
        for (ci, class) in classes.iter().enumerate() {
            let class_tokens: Vec<String> = {
                let mut t = tokens(class.name());
                if t.last().is_some_and(|l| l == "skill") {
                    t.pop();
                }
                t
            };
            for (fi, f) in class.functions().iter().enumerate() {
                let mut doc = Doc {
                    class: ci,
                    function: fi,
                    qualified: f.qualified_name(),
                    terms: HashMap::new(),
                    len: 0.0,
                };
                doc.add(&class_tokens, CLASS_NAME);
                doc.add(&tokens(&f.name), FUNCTION_NAME);
                doc.add(&tokens(&f.summary), SUMMARY);
                doc.add(&tokens(&f.docstring), DOCSTRING);
                doc.add(&tokens(&f.returns_doc), MINOR);
                for p in &f.params {
                    doc.add(&tokens(&p.name), PARAM_NAME);
                    doc.add(&tokens(&p.description), MINOR);
                }
                doc.add(&tokens(class.summary()), CLASS_SUMMARY);
                doc.add(&tokens(class.description()), MINOR);
                let call = format!(".{}(", f.name);
                for example in class.examples() {
                    let weight = if example.code.contains(&call) {
                        EXAMPLE_USING
                    } else {
                        EXAMPLE_OTHER
                    };
                    doc.add(&tokens(&example.request), weight);
                }
                docs.push(doc);
            }
        }
        let mut df: HashMap<String, usize> = HashMap::new();
        for doc in &docs {
            for term in doc.terms.keys() {
                *df.entry(term.clone()).or_default() += 1;
            }
        }
        let avg_len = if docs.is_empty() {
            1.0
        } else {
            docs.iter().map(|d| d.len).sum::<f32>() / docs.len() as f32
        };
        Index { docs, df, avg_len }
    }

    /// Ranks the functions of `classes` (the ones this index was built from).
    pub(crate) fn search<'a, C: ClassText>(
        &self,
        classes: &'a [C],
        query: &str,
        limit: usize,
    ) -> Vec<SearchHit<'a>> {
        let function = |doc: &Doc| &classes[doc.class].functions()[doc.function];
        let mut query_terms = tokens(query);
        let mut seen = HashSet::new();
        query_terms.retain(|t| seen.insert(t.clone()));
        let mut scored: Vec<(f32, &Doc)> = if query_terms.is_empty() {
            self.docs.iter().map(|d| (0.0, d)).collect()
        } else {
            let expansions: Vec<Vec<(&str, f32)>> =
                query_terms.iter().map(|q| self.expand(q)).collect();
            self.docs
                .iter()
                .map(|doc| {
                    let score: f32 = expansions
                        .iter()
                        .map(|terms| {
                            terms
                                .iter()
                                .map(|(term, factor)| factor * self.bm25(term, doc))
                                .fold(0.0, f32::max)
                        })
                        .sum();
                    (score, doc)
                })
                .filter(|(score, _)| *score > 0.0)
                .collect()
        };
        scored.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then_with(|| a.1.qualified.cmp(&b.1.qualified))
        });
        scored
            .into_iter()
            .take(limit)
            .map(|(score, doc)| SearchHit {
                function: function(doc),
                score,
            })
            .collect()
    }

    /// The index terms a query term stands for: itself when the index has it; else,
    /// at a discount, terms within edit distance 1 (2 for long words) and terms it
    /// begins. A known word is taken as meant: its near neighbours can be rarer and
    /// would otherwise outrank it ("timer" is not a typo of "time").
    fn expand<'s>(&'s self, query: &str) -> Vec<(&'s str, f32)> {
        if let Some((term, _)) = self.df.get_key_value(query) {
            return vec![(term.as_str(), 1.0)];
        }
        let len = query.chars().count();
        let allowed = match len {
            0..=3 => 0,
            4..=7 => 1,
            _ => 2,
        };
        self.df
            .keys()
            .filter_map(|term| {
                let term_len = term.chars().count();
                if term_len.abs_diff(len) <= allowed {
                    match edit_distance(query, term) {
                        1 if allowed >= 1 => return Some((term.as_str(), 0.7)),
                        2 if allowed >= 2 => return Some((term.as_str(), 0.5)),
                        _ => {}
                    }
                }
                (len >= 3 && term.starts_with(query)).then_some((term.as_str(), 0.5))
            })
            .collect()
    }

    fn bm25(&self, term: &str, doc: &Doc) -> f32 {
        let Some(&tf) = doc.terms.get(term) else {
            return 0.0;
        };
        let n = self.docs.len() as f32;
        let df = self.df.get(term).copied().unwrap_or(0) as f32;
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
        idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * doc.len / self.avg_len))
    }
}

impl Doc {
    fn add(&mut self, tokens: &[String], weight: f32) {
        for token in tokens {
            *self.terms.entry(token.clone()).or_default() += weight;
            self.len += weight;
        }
    }
}

/// Lowercased, stemmed words of `text`, CamelCase and snake_case split, stopwords out.
fn tokens(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    for run in text.split(|c: char| !c.is_alphanumeric()) {
        let chars: Vec<char> = run.chars().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let lower_to_upper = chars[i - 1].is_lowercase() && chars[i].is_uppercase();
            // The end of an acronym: "HTTPServer" -> "HTTP", "Server".
            let acronym_end = chars[i - 1].is_uppercase()
                && chars[i].is_uppercase()
                && chars.get(i + 1).is_some_and(|c| c.is_lowercase());
            if lower_to_upper || acronym_end {
                words.push(chars[start..i].iter().collect::<String>());
                start = i;
            }
        }
        if start < chars.len() {
            words.push(chars[start..].iter().collect::<String>());
        }
    }
    words
        .into_iter()
        .map(|w| w.to_lowercase())
        .filter(|w| w.chars().count() > 1 && !STOPWORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect()
}

/// A light suffix stripper: enough that "songs", "timers", "playing" and "played"
/// meet "song", "timer" and "play"; applied to queries and the index alike.
fn stem(word: &str) -> String {
    let len = word.len();
    if !word.is_ascii() {
        return word.to_string();
    }
    let undouble = |stem: &str| -> String {
        let bytes = stem.as_bytes();
        let n = bytes.len();
        if n >= 2 && bytes[n - 1] == bytes[n - 2] && !b"aeiouls".contains(&bytes[n - 1]) {
            stem[..n - 1].to_string()
        } else {
            stem.to_string()
        }
    };
    if len > 4 && word.ends_with("ies") {
        format!("{}y", &word[..len - 3])
    } else if len > 4
        && ["sses", "xes", "ches", "shes", "zes"]
            .iter()
            .any(|s| word.ends_with(s))
    {
        word[..len - 2].to_string()
    } else if len > 3
        && word.ends_with('s')
        && !["ss", "us", "is"].iter().any(|s| word.ends_with(s))
    {
        word[..len - 1].to_string()
    } else if len > 5 && word.ends_with("ing") {
        undouble(&word[..len - 3])
    } else if len > 4 && word.ends_with("ed") {
        undouble(&word[..len - 2])
    } else {
        word.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::{stem, tokens};

    #[test]
    fn splits_names_and_stems_words() {
        assert_eq!(tokens("SystemInfoSkill"), ["system", "info", "skill"]);
        assert_eq!(
            tokens("HTTPServer set_volume"),
            ["http", "server", "set", "volume"]
        );
        assert_eq!(tokens("Play the songs"), ["play", "song"]);
        assert_eq!(stem("timers"), "timer");
        assert_eq!(stem("playing"), "play");
        assert_eq!(stem("stopped"), "stop");
        assert_eq!(stem("status"), "status");
        assert_eq!(stem("batteries"), "battery");
    }
}
