//! Ranking skill functions for a free-text query.
//!
//! The model searches with the words of the user's request ("play a song", "how warm
//! is it"), which rarely match function names exactly, so this is a small relevance
//! ranker rather than a substring filter: BM25 over weighted fields (names weigh most,
//! then summaries, then the rest), light stemming, and typo tolerance by edit distance.
//!
//! Words alone miss synonyms ("telly" for "TV", "lamp" for "light"), so when an
//! embedding model is loaded ([`crate::embed`]) each function's text is also embedded
//! once, when its index is built, and [`score`] blends the cosine similarity of the
//! request with the lexical score ([`LEXICAL_WEIGHT`]). Without a model the ranking is
//! lexical only.
//!
//! Documentation says what a function does in its author's words; people ask in theirs
//! ("I fancy a cuppa" for `KettleSkill.switch_on`), and no sentence model we can run on
//! a spoke bridges that gap reliably. So, as other voice assistants ask for sample
//! utterances, a function may carry `@request` lines, ways people ask for it; each is
//! embedded too (as are the requests of the class's examples that call it), and a
//! request counts as close to the function as to the closest of them. On the retrieval
//! benchmark they are worth more than any model change measured (BENCHMARKS.md).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{ClassDoc, SkillFunction};
use crate::embed::{self, Semantic};
use crate::text::edit_distance;

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
/// Example requests that use the function (and its `@request` lines) are strong
/// hints; the class's other examples, weak ones.
const EXAMPLE_USING: f32 = 1.0;
const EXAMPLE_OTHER: f32 = 0.3;
const MINOR: f32 = 0.5;

/// Bounds on the work of one search, whatever the query and the vocabulary: words of
/// a query looked at, and index terms one misspelt word may stand for.
const MAX_QUERY_TERMS: usize = 32;
const MAX_EXPANSIONS: usize = 64;

/// The weight of the lexical score (BM25 divided by the best score of the search, so
/// in 0..=1) added to the cosine similarity of request and function text (-1..=1, in
/// practice 0 to 0.8 with MiniLM). Chosen on the dev half of the retrieval benchmark
/// (`benches/retrieval.rs`, BENCHMARKS.md): recall is flat from about 0.2 to 0.4 and
/// falls on either side (below, a shared word such as a room name counts too little;
/// above, lexical near-misses outrank synonyms); the held-out half was only scored.
/// With `@request` lines the dev half is flat from 0.1 to 0.5 (recall@5 best from 0.3).
pub const LEXICAL_WEIGHT: f32 = 0.3;

const K1: f32 = 1.2;
const B: f32 = 0.5;

const STOPWORDS: [&str; 34] = [
    "a", "an", "the", "of", "to", "in", "on", "at", "for", "and", "or", "is", "are", "be", "it",
    "its", "this", "that", "with", "by", "from", "as", "what", "how", "me", "my", "you", "your",
    "do", "does", "can", "please", "if", "into",
];

/// Field-weighted term frequencies of some text.
#[derive(Debug, Default)]
struct Terms {
    tf: HashMap<String, f32>,
    len: f32,
}

impl Terms {
    fn add(&mut self, tokens: &[String], weight: f32) {
        for token in tokens {
            *self.tf.entry(token.clone()).or_default() += weight;
            self.len += weight;
        }
    }

    fn get(&self, term: &str) -> f32 {
        self.tf.get(term).copied().unwrap_or(0.0)
    }
}

/// The terms of one class: what all its functions share, kept once (class name,
/// summary, description, examples at their weak weight), and each function's own.
#[derive(Debug)]
struct ClassTerms {
    shared: Terms,
    functions: Vec<Terms>,
    /// Each function's embeddings, when the index has a model: its documentation's
    /// first, then one per way of asking for it (its `@request` lines and the class's
    /// `@example` requests whose code calls it).
    vectors: Vec<Vec<Arc<[f32]>>>,
}

/// The searchable text of a set of skill classes, tokenised once when the set changes
/// (skills load, a peer registers) so that a search only reads it. A class's text is
/// held once, not copied into each of its functions: the index grows with the text,
/// not with functions times text.
#[derive(Debug, Default)]
pub struct ClassIndex {
    classes: Vec<ClassTerms>,
    /// Every term, for typo tolerance.
    vocabulary: HashSet<String>,
    /// The model the functions were embedded with; `None`: lexical only.
    semantic: Option<Arc<Semantic>>,
}

/// One function's text in a [`ClassIndex`]; documents of several indexes (this
/// device's and its peers') rank together with [`score`].
#[derive(Debug, Clone, Copy)]
pub struct Doc<'a> {
    index: &'a ClassIndex,
    class: usize,
    function: usize,
}

impl Doc<'_> {
    fn parts(&self) -> (&Terms, &Terms) {
        let class = &self.index.classes[self.class];
        (&class.shared, &class.functions[self.function])
    }

    fn tf(&self, term: &str) -> f32 {
        let (shared, own) = self.parts();
        shared.get(term) + own.get(term)
    }

    fn len(&self) -> f32 {
        let (shared, own) = self.parts();
        shared.len + own.len
    }

    fn vectors(&self) -> Option<&[Arc<[f32]>]> {
        self.index.classes[self.class]
            .vectors
            .get(self.function)
            .map(|v| &v[..])
    }
}

/// Whether an example's code calls `function` (of its class).
fn calls(code: &str, function: &SkillFunction) -> bool {
    code.contains(&format!(".{}(", function.name))
}

/// What of a function is embedded: its words as a sentence, the most telling first
/// (MiniLM reads 128 tokens at most): name, summary, docstring, parameter names, then
/// the class's name and summary, with names split into words ("power_on" -> "power on").
pub fn embedding_text(class: &ClassDoc, function: &SkillFunction) -> String {
    let words = |name: &str| {
        let mut words = split_name(name);
        if words.len() > 1 && words.last().is_some_and(|w| w == "skill") {
            words.pop();
        }
        words.join(" ")
    };
    let mut text = format!("{}: {}", words(&function.name), function.summary.trim());
    if !function.docstring.trim().is_empty() {
        text.push(' ');
        text.push_str(function.docstring.trim());
    }
    if !function.params.is_empty() {
        let params: Vec<String> = function.params.iter().map(|p| words(&p.name)).collect();
        text.push_str(&format!(" ({})", params.join(", ")));
    }
    text.push_str(&format!(
        " - {}: {}",
        words(&class.name),
        class.summary.trim()
    ));
    text
}

impl ClassIndex {
    /// Indexes every function of `classes`, embedding their text with `semantic` (whose
    /// cache makes unchanged text cost a lookup).
    pub fn build_with<C: AsRef<ClassDoc>>(
        classes: &[C],
        semantic: Option<Arc<Semantic>>,
    ) -> ClassIndex {
        let mut vocabulary = HashSet::new();
        let classes = classes
            .iter()
            .map(|class| {
                let class = class.as_ref();
                let mut shared = Terms::default();
                let mut class_tokens = tokens(&class.name);
                if class_tokens.last().is_some_and(|l| l == "skill") {
                    class_tokens.pop();
                }
                shared.add(&class_tokens, CLASS_NAME);
                shared.add(&tokens(&class.summary), CLASS_SUMMARY);
                shared.add(&tokens(&class.description), MINOR);
                let examples: Vec<Vec<String>> =
                    class.examples.iter().map(|e| tokens(&e.request)).collect();
                for example in &examples {
                    shared.add(example, EXAMPLE_OTHER);
                }
                let functions = class
                    .functions
                    .iter()
                    .map(|f| {
                        let mut own = Terms::default();
                        own.add(&tokens(&f.name), FUNCTION_NAME);
                        own.add(&tokens(&f.summary), SUMMARY);
                        own.add(&tokens(&f.docstring), DOCSTRING);
                        own.add(&tokens(&f.returns_doc), MINOR);
                        for p in &f.params {
                            own.add(&tokens(&p.name), PARAM_NAME);
                            own.add(&tokens(&p.description), MINOR);
                        }
                        for request in &f.requests {
                            own.add(&tokens(request), EXAMPLE_USING);
                        }
                        // The rest of an example's weight when it uses this function.
                        for (example, words) in class.examples.iter().zip(&examples) {
                            if calls(&example.code, f) {
                                own.add(words, EXAMPLE_USING - EXAMPLE_OTHER);
                            }
                        }
                        vocabulary.extend(own.tf.keys().cloned());
                        own
                    })
                    .collect();
                vocabulary.extend(shared.tf.keys().cloned());
                let vectors = match &semantic {
                    Some(semantic) => class
                        .functions
                        .iter()
                        .map(|f| {
                            let asked = class
                                .examples
                                .iter()
                                .filter(|e| calls(&e.code, f))
                                .map(|e| &e.request);
                            std::iter::once(embedding_text(class, f))
                                .chain(f.requests.iter().chain(asked).cloned())
                                .map(|text| semantic.embed_cached(&text))
                                .collect()
                        })
                        .collect(),
                    None => Vec::new(),
                };
                ClassTerms {
                    shared,
                    functions,
                    vectors,
                }
            })
            .collect();
        // After this index took its vectors: what no index holds now belongs to skills
        // that are gone or changed (an index being replaced still holds its own until
        // it is dropped; the next build sweeps those).
        if let Some(semantic) = &semantic {
            semantic.sweep();
        }
        ClassIndex {
            classes,
            vocabulary,
            semantic,
        }
    }

    /// Function `function` of class `class` (positions in the indexed classes).
    pub fn doc(&self, class: usize, function: usize) -> Doc<'_> {
        Doc {
            index: self,
            class,
            function,
        }
    }

    /// Ranks the functions of `classes` (the ones this index was built from), best
    /// first, at most `limit`.
    pub fn search<'a, C: AsRef<ClassDoc>>(
        &self,
        classes: &'a [C],
        query: &str,
        limit: usize,
    ) -> Vec<SearchHit<'a>> {
        let docs: Vec<Doc<'_>> = self
            .classes
            .iter()
            .enumerate()
            .flat_map(|(ci, c)| (0..c.functions.len()).map(move |fi| self.doc(ci, fi)))
            .collect();
        let scores = score(&docs, query);
        let mut hits: Vec<SearchHit<'a>> = docs
            .iter()
            .zip(scores)
            .filter(|(_, score)| query_is_empty(query) || *score > 0.0)
            .map(|(doc, score)| SearchHit {
                function: &classes[doc.class].as_ref().functions[doc.function],
                score,
            })
            .collect();
        // Best first; among equals by class, then function name.
        hits.sort_by(|a, b| {
            b.score.total_cmp(&a.score).then_with(|| {
                (&a.function.class, &a.function.name).cmp(&(&b.function.class, &b.function.name))
            })
        });
        hits.truncate(limit);
        hits
    }
}

/// Whether `query` has no searchable word (everything matches, with score 0).
pub fn query_is_empty(query: &str) -> bool {
    tokens(query).is_empty()
}

/// Scores `docs` for `query` as one collection (BM25 statistics over exactly these
/// documents), one score per document, 0 for no match. The work is linear in the
/// documents and their vocabularies; nothing is tokenised here but the query.
pub fn score(docs: &[Doc<'_>], query: &str) -> Vec<f32> {
    let lexical = lexical_score(docs, query);
    match semantic_score(docs, query) {
        Some(cosines) => hybrid(&lexical, &cosines, LEXICAL_WEIGHT),
        None => lexical,
    }
}

/// The embedding part of [`score`]: each document's similarity to `query` by meaning;
/// `None` when the documents were not all embedded with one model or the query has
/// no searchable word.
pub fn semantic_score(docs: &[Doc<'_>], query: &str) -> Option<Vec<f32>> {
    if query_is_empty(query) {
        return None;
    }
    let semantic = common_model(docs)?;
    let wanted = semantic.embed_query(query);
    Some(
        docs.iter()
            .map(|d| d.vectors().map_or(0.0, |v| similarity(&wanted, v)))
            .collect(),
    )
}

/// Blends lexical scores with cosine similarities: cosine plus `lexical_weight` times
/// the lexical score relative to the best one ([`LEXICAL_WEIGHT`] in [`score`]).
/// Scores stay above 0 for ranking (a function unrelated in both senses scores near 0).
pub fn hybrid(lexical: &[f32], cosines: &[f32], lexical_weight: f32) -> Vec<f32> {
    let best = lexical.iter().copied().fold(0.0f32, f32::max);
    lexical
        .iter()
        .zip(cosines)
        .map(|(l, c)| {
            let l = if best > 0.0 { l / best } else { 0.0 };
            (c.max(0.0) + lexical_weight * l).max(f32::MIN_POSITIVE)
        })
        .collect()
}

/// How close a request is to a function by meaning: to its documentation, or to one
/// of the ways its author wrote that people ask for it, whichever is closer.
fn similarity(wanted: &[f32], vectors: &[Arc<[f32]>]) -> f32 {
    vectors
        .iter()
        .map(|v| embed::cosine(wanted, v))
        .fold(0.0, f32::max)
}

/// The model every document was embedded with, when they all were with the same one
/// (documents of indexes built with and without a model rank lexically, on one scale).
fn common_model<'a>(docs: &[Doc<'a>]) -> Option<&'a Arc<Semantic>> {
    let first = docs.first()?.index.semantic.as_ref()?;
    docs.iter()
        .all(|d| {
            d.index
                .semantic
                .as_ref()
                .is_some_and(|s| Arc::ptr_eq(s, first))
                && d.vectors().is_some()
        })
        .then_some(first)
}

/// The BM25 part of [`score`].
pub fn lexical_score(docs: &[Doc<'_>], query: &str) -> Vec<f32> {
    let mut query_terms = tokens(query);
    let mut seen = HashSet::new();
    query_terms.retain(|t| seen.insert(t.clone()));
    query_terms.truncate(MAX_QUERY_TERMS);
    if query_terms.is_empty() || docs.is_empty() {
        return vec![0.0; docs.len()];
    }
    let mut indexes: Vec<&ClassIndex> = Vec::new();
    let mut known = HashSet::new();
    for doc in docs {
        if known.insert(std::ptr::from_ref(doc.index)) {
            indexes.push(doc.index);
        }
    }
    let n = docs.len() as f32;
    let avg_len = docs.iter().map(Doc::len).sum::<f32>() / n;
    let df = |term: &str| docs.iter().filter(|d| d.tf(term) > 0.0).count();
    // Per query term: the index terms it stands for, with their factor and idf.
    let expansions: Vec<Vec<(&str, f32, f32)>> = query_terms
        .iter()
        .map(|q| {
            let idf = |df: usize| (1.0 + (n - df as f32 + 0.5) / (df as f32 + 0.5)).ln();
            let exact = df(q);
            if exact > 0 {
                return vec![(q.as_str(), 1.0, idf(exact))];
            }
            let mut near: HashMap<&str, f32> = HashMap::new();
            for index in &indexes {
                for (term, factor) in expand(&index.vocabulary, q) {
                    let best = near.entry(term).or_default();
                    *best = best.max(factor);
                }
            }
            let mut near: Vec<(&str, f32)> = near.into_iter().collect();
            near.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
            near.truncate(MAX_EXPANSIONS);
            near.into_iter()
                .filter_map(|(term, factor)| {
                    let df = df(term);
                    (df > 0).then(|| (term, factor, idf(df)))
                })
                .collect()
        })
        .collect();
    docs.iter()
        .map(|doc| {
            let len = doc.len();
            expansions
                .iter()
                .map(|terms| {
                    terms
                        .iter()
                        .map(|(term, factor, idf)| {
                            let tf = doc.tf(term);
                            factor * idf * tf * (K1 + 1.0)
                                / (tf + K1 * (1.0 - B + B * len / avg_len))
                        })
                        .fold(0.0, f32::max)
                })
                .sum()
        })
        .collect()
}

/// The terms of `vocabulary` a query term that is not in the index may stand for, at a
/// discount: within edit distance 1 (2 for long words), and terms it begins. A known
/// word is taken as meant (the caller checks that first): its near neighbours can be
/// rarer and would otherwise outrank it ("timer" is not a typo of "time").
fn expand<'s>(vocabulary: &'s HashSet<String>, query: &str) -> Vec<(&'s str, f32)> {
    let len = query.chars().count();
    let allowed = match len {
        0..=3 => 0,
        4..=7 => 1,
        _ => 2,
    };
    vocabulary
        .iter()
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

/// Lowercased, stemmed words of `text`, CamelCase and snake_case split, stopwords out.
fn tokens(text: &str) -> Vec<String> {
    split_name(text)
        .into_iter()
        .filter(|w| w.chars().count() > 1 && !STOPWORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect()
}

/// Lowercased words of `text`, CamelCase and snake_case split.
fn split_name(text: &str) -> Vec<String> {
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
    words.into_iter().map(|w| w.to_lowercase()).collect()
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
