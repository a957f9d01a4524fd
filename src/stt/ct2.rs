//! Import a faster-whisper (CTranslate2) Whisper model as a ggml file whisper.cpp loads.
//!
//! Why: people who already run a voice setup usually have faster-whisper models on disk,
//! and where no model hub is reachable a CTranslate2 model may be the only copy of the
//! weights at hand. The conversion is exact up to the storage type (f16 or q8_0):
//!
//! - CTranslate2 fuses the self-attention projections into one `linear_0` (rows: query,
//!   key, value) and the cross-attention key and value into one `linear_1`; whisper.cpp
//!   wants them apart. Its key bias is all zeros; whisper.cpp has none (a key bias adds
//!   the same number to every score of a query, which softmax ignores, so dropping it is
//!   exact either way).
//! - `vocabulary.txt` holds GPT-2 byte-level tokens (`Ġthe`); whisper.cpp wants the raw
//!   bytes and adds the special tokens (`<|endoftext|>` on) itself.
//! - CTranslate2 keeps no mel filterbank: whisper.cpp reads one from the file, so it is
//!   computed here (the Slaney-style filterbank Whisper was trained with).
//! - whisper.cpp aborts on an all-f32 model, so weights are written as f16, or q8_0 when
//!   asked; biases, norms and position embeddings stay f32 as in whisper.cpp's own files.
//!
//! Formats: CTranslate2's `model.bin` (binary version 6, `ModelSpec._serialize` in
//! CTranslate2's `python/ctranslate2/specs/model_spec.py`) and whisper.cpp's ggml file
//! (`convert-pt-to-ggml.py`, read by `whisper_model_load`).

use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use half::{bf16, f16};

/// How the large weight matrices are stored in the ggml file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Quantize {
    /// 16-bit floats: the weights as faster-whisper ships them.
    #[default]
    F16,
    /// 8-bit blocks of 32 with an f16 scale: about half the size, faster on a Pi.
    Q8_0,
}

impl FromStr for Quantize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "f16" => Ok(Quantize::F16),
            "q8_0" => Ok(Quantize::Q8_0),
            other => Err(format!("unknown weight type {other:?}: use f16 or q8_0")),
        }
    }
}

impl fmt::Display for Quantize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Quantize::F16 => "f16",
            Quantize::Q8_0 => "q8_0",
        })
    }
}

/// Why an import failed. Each names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A file of the model directory could not be read.
    #[error(
        "cannot read {path}: {source} (a faster-whisper model directory holds model.bin, config.json and vocabulary.txt)"
    )]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `model.bin` is not a CTranslate2 model this importer understands.
    #[error("{path}: {message}")]
    Format { path: PathBuf, message: String },
    /// The model is a CTranslate2 model, but not a Whisper one.
    #[error("{path}: not a Whisper model: {message}")]
    NotWhisper { path: PathBuf, message: String },
    /// `vocabulary.txt` does not hold byte-level BPE tokens.
    #[error("{path}: line {line}: {message}")]
    Vocabulary {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// The output could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What an import produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportSummary {
    /// Encoder layers.
    pub audio_layers: usize,
    /// Decoder layers.
    pub text_layers: usize,
    /// Model width.
    pub state: usize,
    /// Vocabulary size, special tokens included.
    pub vocab: usize,
    /// Mel bands.
    pub mels: usize,
    /// Tensors written.
    pub tensors: usize,
    /// Bytes written.
    pub bytes: u64,
    /// How the weights are stored.
    pub quantize: Quantize,
}

/// Converts the CTranslate2 Whisper model in `dir` to a ggml file at `out`.
///
/// The file is written next to `out` and renamed into place, so `out` is either the
/// whole model or untouched.
pub fn import(dir: &Path, out: &Path, quantize: Quantize) -> Result<ImportSummary, ImportError> {
    let model_path = dir.join("model.bin");
    let bytes = std::fs::read(&model_path).map_err(|source| ImportError::Read {
        path: model_path.clone(),
        source,
    })?;
    // config.json must exist (it marks a faster-whisper directory); what whisper.cpp
    // needs from it (languages, suppressed tokens) it derives from the vocabulary size.
    let config_path = dir.join("config.json");
    std::fs::metadata(&config_path).map_err(|source| ImportError::Read {
        path: config_path,
        source,
    })?;
    let vocab_path = dir.join("vocabulary.txt");
    let vocab_text = std::fs::read_to_string(&vocab_path).map_err(|source| ImportError::Read {
        path: vocab_path.clone(),
        source,
    })?;

    let model = Ct2Model::parse(&bytes).map_err(|message| ImportError::Format {
        path: model_path.clone(),
        message,
    })?;
    let not_whisper = |message: String| ImportError::NotWhisper {
        path: model_path.clone(),
        message,
    };
    if model.spec != "WhisperSpec" {
        return Err(not_whisper(format!(
            "the model spec is {:?}, expected \"WhisperSpec\"",
            model.spec
        )));
    }
    let tokens = regular_tokens(&vocab_text, &vocab_path)?;
    let tensors = whisper_tensors(&model, quantize).map_err(not_whisper)?;
    let hp = tensors.hparams;

    let tmp = out.with_extension("partial");
    let write_err = |source| ImportError::Write {
        path: out.to_path_buf(),
        source,
    };
    let file = std::fs::File::create(&tmp).map_err(write_err)?;
    let mut w = std::io::BufWriter::new(file);
    let result = (|| -> std::io::Result<u64> {
        let mut n = 0u64;
        let mut put = |w: &mut std::io::BufWriter<std::fs::File>, b: &[u8]| {
            n += b.len() as u64;
            w.write_all(b)
        };
        put(&mut w, &GGML_MAGIC.to_le_bytes())?;
        let ftype = match quantize {
            Quantize::F16 => FTYPE_MOSTLY_F16,
            Quantize::Q8_0 => FTYPE_MOSTLY_Q8_0 + GGML_QNT_VERSION * GGML_QNT_VERSION_FACTOR,
        };
        let vocab_size = tensors.vocab as i32;
        for v in [
            vocab_size,
            hp.audio_ctx as i32,
            hp.state as i32,
            hp.audio_heads as i32,
            hp.audio_layers as i32,
            hp.text_ctx as i32,
            hp.state as i32,
            hp.text_heads as i32,
            hp.text_layers as i32,
            hp.mels as i32,
            ftype,
        ] {
            put(&mut w, &v.to_le_bytes())?;
        }
        let filters = mel_filters(hp.mels, N_FFT, SAMPLE_RATE);
        put(&mut w, &(hp.mels as i32).to_le_bytes())?;
        put(&mut w, &((N_FFT / 2 + 1) as i32).to_le_bytes())?;
        for f in filters {
            put(&mut w, &f.to_le_bytes())?;
        }
        put(&mut w, &(tokens.len() as i32).to_le_bytes())?;
        for token in &tokens {
            put(&mut w, &(token.len() as u32).to_le_bytes())?;
            put(&mut w, token)?;
        }
        for t in &tensors.list {
            put(&mut w, &(t.dims.len() as i32).to_le_bytes())?;
            put(&mut w, &(t.name.len() as i32).to_le_bytes())?;
            put(&mut w, &t.ggml_type.to_le_bytes())?;
            // ggml lists dimensions innermost first.
            for d in t.dims.iter().rev() {
                put(&mut w, &(*d as i32).to_le_bytes())?;
            }
            put(&mut w, t.name.as_bytes())?;
            put(&mut w, &t.data)?;
        }
        w.flush()?;
        Ok(n)
    })();
    let written = match result {
        Ok(n) => n,
        Err(source) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(write_err(source));
        }
    };
    drop(w);
    std::fs::rename(&tmp, out).map_err(write_err)?;
    Ok(ImportSummary {
        audio_layers: hp.audio_layers,
        text_layers: hp.text_layers,
        state: hp.state,
        vocab: tensors.vocab,
        mels: hp.mels,
        tensors: tensors.list.len(),
        bytes: written,
        quantize,
    })
}

const GGML_MAGIC: u32 = 0x6767_6d6c;
const FTYPE_MOSTLY_F16: i32 = 1;
const FTYPE_MOSTLY_Q8_0: i32 = 7;
const GGML_QNT_VERSION: i32 = 2;
const GGML_QNT_VERSION_FACTOR: i32 = 1000;
const GGML_TYPE_F32: i32 = 0;
const GGML_TYPE_F16: i32 = 1;
const GGML_TYPE_Q8_0: i32 = 8;
const Q8_0_BLOCK: usize = 32;
const N_FFT: usize = 400;
const SAMPLE_RATE: f64 = 16_000.0;
/// The CTranslate2 `model.bin` layout this importer reads.
const CT2_BINARY_VERSION: u32 = 6;

/// CTranslate2's `DataType` enum as stored in `model.bin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DType {
    F32,
    I8,
    I16,
    I32,
    F16,
    Bf16,
}

impl DType {
    fn from_code(code: u8) -> Option<DType> {
        Some(match code {
            0 => DType::F32,
            1 => DType::I8,
            2 => DType::I16,
            3 => DType::I32,
            4 => DType::F16,
            5 => DType::Bf16,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            DType::I8 => 1,
            DType::I16 | DType::F16 | DType::Bf16 => 2,
            DType::F32 | DType::I32 => 4,
        }
    }
}

#[derive(Debug)]
struct Variable<'a> {
    shape: Vec<usize>,
    dtype: DType,
    data: &'a [u8],
}

/// A parsed `model.bin`: variables borrow the file's bytes.
#[derive(Debug)]
struct Ct2Model<'a> {
    spec: String,
    variables: HashMap<String, Variable<'a>>,
    /// Alias -> variable (CTranslate2 stores tied weights once).
    aliases: HashMap<String, String>,
}

/// A bounds-checked reader over `model.bin`: a short file is an error, never a panic.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(format!(
                "truncated: {what} needs {n} bytes at offset {} but the file has {} (re-download or re-convert the model)",
                self.pos,
                self.bytes.len()
            ));
        };
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A length-prefixed, NUL-terminated UTF-8 string.
    fn string(&mut self, what: &str) -> Result<String, String> {
        let len = usize::from(self.u16(what)?);
        let raw = self.take(len, what)?;
        let raw = raw.strip_suffix(&[0]).unwrap_or(raw);
        String::from_utf8(raw.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
    }
}

impl<'a> Ct2Model<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Ct2Model<'a>, String> {
        let mut r = Reader { bytes, pos: 0 };
        let version = r.u32("the format version")?;
        if version != CT2_BINARY_VERSION {
            return Err(format!(
                "not a CTranslate2 model.bin this importer reads: format version {version}, expected {CT2_BINARY_VERSION} (written by CTranslate2 3.x and 4.x; re-convert the model with a current ct2-transformers-converter)"
            ));
        }
        let spec = r.string("the spec name")?;
        let _revision = r.u32("the spec revision")?;
        let count = r.u32("the variable count")?;
        let mut variables = HashMap::new();
        for i in 0..count {
            let name = r.string(&format!("the name of variable {i}"))?;
            let rank = r.u8(&format!("the rank of {name}"))?;
            let mut shape = Vec::with_capacity(usize::from(rank));
            for _ in 0..rank {
                shape.push(r.u32(&format!("the shape of {name}"))? as usize);
            }
            let code = r.u8(&format!("the type of {name}"))?;
            let dtype = DType::from_code(code)
                .ok_or_else(|| format!("{name}: unknown data type code {code}"))?;
            let len = r.u32(&format!("the size of {name}"))? as usize;
            let data = r.take(len, &format!("the data of {name}"))?;
            let elements = shape
                .iter()
                .try_fold(1usize, |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| format!("{name}: shape {shape:?} overflows"))?;
            if elements.checked_mul(dtype.size()) != Some(len) {
                return Err(format!(
                    "{name}: {len} bytes do not hold shape {shape:?} of {dtype:?}"
                ));
            }
            variables.insert(name, Variable { shape, dtype, data });
        }
        let count = r.u32("the alias count")?;
        let mut aliases = HashMap::new();
        for _ in 0..count {
            let alias = r.string("an alias")?;
            let target = r.string("an alias target")?;
            aliases.insert(alias, target);
        }
        if r.pos != bytes.len() {
            return Err(format!(
                "{} unexpected bytes after the last alias",
                bytes.len() - r.pos
            ));
        }
        Ok(Ct2Model {
            spec,
            variables,
            aliases,
        })
    }

    /// The variable an alias stands for, or the name itself.
    fn resolve<'n>(&'n self, name: &'n str) -> &'n str {
        self.aliases.get(name).map_or(name, String::as_str)
    }

    fn get(&self, name: &str) -> Result<&Variable<'a>, String> {
        self.variables
            .get(self.resolve(name))
            .ok_or_else(|| format!("variable {name} is missing"))
    }

    /// A variable as f32 values; int8 weights are scaled back with `{name}_scale`.
    fn floats(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>), String> {
        let name = self.resolve(name);
        let v = self.get(name)?;
        let values: Vec<f32> = match v.dtype {
            DType::F32 => v
                .data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            DType::F16 => v
                .data
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            DType::Bf16 => v
                .data
                .chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            DType::I8 => {
                // CTranslate2 int8: one scale per output row, q = round(w * scale).
                let (_, scales) = self.floats(&format!("{name}_scale"))?;
                let rows = v.shape.first().copied().unwrap_or(1);
                if scales.len() != rows || rows == 0 {
                    return Err(format!(
                        "{name}_scale has {} values for {rows} rows",
                        scales.len()
                    ));
                }
                let cols = v.data.len() / rows;
                v.data
                    .iter()
                    .enumerate()
                    .map(|(i, &q)| f32::from(q as i8) / scales[i / cols])
                    .collect()
            }
            DType::I16 | DType::I32 => {
                return Err(format!(
                    "{name} is {:?}: only float and int8 weights can be imported (re-convert with --quantization float16)",
                    v.dtype
                ));
            }
        };
        Ok((v.shape.clone(), values))
    }

    /// A scalar integer (`encoder/num_heads`).
    fn int(&self, name: &str) -> Result<usize, String> {
        let v = self.get(name)?;
        let value: i64 = match (v.dtype, v.data) {
            (DType::I8, [b]) => i64::from(*b as i8),
            (DType::I16, [a, b]) => i64::from(i16::from_le_bytes([*a, *b])),
            (DType::I32, [a, b, c, d]) => i64::from(i32::from_le_bytes([*a, *b, *c, *d])),
            _ => return Err(format!("{name} is not an integer scalar")),
        };
        usize::try_from(value)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{name} is {value}, expected a positive number"))
    }

    fn layers(&self, prefix: &str) -> usize {
        (0..)
            .take_while(|i| {
                self.variables
                    .contains_key(&format!("{prefix}/layer_{i}/ffn/linear_0/weight"))
            })
            .count()
    }
}

#[derive(Debug, Clone, Copy)]
struct HParams {
    audio_ctx: usize,
    text_ctx: usize,
    state: usize,
    audio_heads: usize,
    text_heads: usize,
    audio_layers: usize,
    text_layers: usize,
    mels: usize,
}

/// One tensor, ready to write.
struct Tensor {
    name: String,
    /// Outermost first, as in PyTorch.
    dims: Vec<usize>,
    ggml_type: i32,
    data: Vec<u8>,
}

struct WhisperTensors {
    hparams: HParams,
    vocab: usize,
    list: Vec<Tensor>,
}

/// How a tensor is stored: weight matrices follow `--quantize`; convolutions are f16
/// (whisper.cpp's fixed type for them); the rest f32.
#[derive(Clone, Copy)]
enum Store {
    Weight,
    Conv,
    F32,
}

/// Collects the ggml tensors, checking every shape against the model's width.
struct Builder<'m, 'a> {
    model: &'m Ct2Model<'a>,
    state: usize,
    quantize: Quantize,
    list: Vec<Tensor>,
}

impl Builder<'_, '_> {
    fn push(&mut self, name: String, dims: Vec<usize>, values: &[f32], store: Store) {
        let (ggml_type, data) = encode(values, &dims, store, self.quantize);
        self.list.push(Tensor {
            name,
            dims,
            ggml_type,
            data,
        });
    }

    /// One variable under its whisper.cpp name, with the shape checked.
    fn copy(&mut self, from: &str, to: &str, expect: &[usize], store: Store) -> Result<(), String> {
        let (shape, values) = self.model.floats(from)?;
        if shape != expect {
            return Err(format!("{from} has shape {shape:?}, expected {expect:?}"));
        }
        self.push(to.to_string(), expect.to_vec(), &values, store);
        Ok(())
    }

    /// A fused projection split into equal row blocks; `None` drops a block.
    fn split(&mut self, from: &str, parts: &[Option<String>], store: Store) -> Result<(), String> {
        let (shape, values) = self.model.floats(from)?;
        let s = self.state;
        let fused = s * parts.len();
        let ok = match shape[..] {
            [rows] => rows == fused,
            [rows, cols] => rows == fused && cols == s,
            _ => false,
        };
        if !ok {
            return Err(format!(
                "{from} has shape {shape:?}, expected {fused} fused rows of width {s}"
            ));
        }
        let mut dims = shape.clone();
        dims[0] = s;
        let block = values.len() / parts.len();
        for (i, name) in parts.iter().enumerate() {
            if let Some(name) = name {
                self.push(
                    name.clone(),
                    dims.clone(),
                    &values[i * block..(i + 1) * block],
                    store,
                );
            }
        }
        Ok(())
    }

    fn layer_norm(&mut self, from: &str, to: &str) -> Result<(), String> {
        let s = self.state;
        self.copy(
            &format!("{from}/gamma"),
            &format!("{to}.weight"),
            &[s],
            Store::F32,
        )?;
        self.copy(
            &format!("{from}/beta"),
            &format!("{to}.bias"),
            &[s],
            Store::F32,
        )
    }

    fn linear(
        &mut self,
        from: &str,
        to: &str,
        out_dim: usize,
        in_dim: usize,
    ) -> Result<(), String> {
        self.copy(
            &format!("{from}/weight"),
            &format!("{to}.weight"),
            &[out_dim, in_dim],
            Store::Weight,
        )?;
        self.copy(
            &format!("{from}/bias"),
            &format!("{to}.bias"),
            &[out_dim],
            Store::F32,
        )
    }

    /// A block's fused self-attention (rows: query, key, value); the key bias is dropped.
    /// A layer's feed-forward block: its layer norm and the two linears (`s` -> `4s` -> `s`).
    fn feed_forward(&mut self, from: &str, to: &str, s: usize) -> Result<(), String> {
        self.layer_norm(&format!("{from}/ffn/layer_norm"), &format!("{to}.mlp_ln"))?;
        self.linear(
            &format!("{from}/ffn/linear_0"),
            &format!("{to}.mlp.0"),
            4 * s,
            s,
        )?;
        self.linear(
            &format!("{from}/ffn/linear_1"),
            &format!("{to}.mlp.2"),
            s,
            4 * s,
        )
    }

    fn self_attention(&mut self, from: &str, to: &str) -> Result<(), String> {
        let s = self.state;
        let name = |part: &str| Some(format!("{to}.attn.{part}"));
        self.split(
            &format!("{from}/self_attention/linear_0/weight"),
            &[
                name("query.weight"),
                name("key.weight"),
                name("value.weight"),
            ],
            Store::Weight,
        )?;
        self.split(
            &format!("{from}/self_attention/linear_0/bias"),
            &[name("query.bias"), None, name("value.bias")],
            Store::F32,
        )?;
        self.linear(
            &format!("{from}/self_attention/linear_1"),
            &format!("{to}.attn.out"),
            s,
            s,
        )
    }

    /// A convolution's bias: whisper.cpp wants it as `[n, 1]`.
    fn conv_bias(&mut self, from: &str, to: &str) -> Result<(), String> {
        let s = self.state;
        let (shape, values) = self.model.floats(from)?;
        if shape != [s] {
            return Err(format!("{from} has shape {shape:?}, expected [{s}]"));
        }
        self.push(to.to_string(), vec![s, 1], &values, Store::F32);
        Ok(())
    }
}

fn whisper_tensors(m: &Ct2Model, quantize: Quantize) -> Result<WhisperTensors, String> {
    let conv1 = &m.get("encoder/conv1/weight")?.shape;
    let [state, mels, 3] = conv1[..] else {
        return Err(format!(
            "encoder/conv1/weight has shape {conv1:?}, expected [width, mels, 3]"
        ));
    };
    let rows = |name: &str| -> Result<usize, String> {
        match m.get(name)?.shape[..] {
            [rows, width] if width == state && rows > 0 => Ok(rows),
            ref other => Err(format!("{name} has shape {other:?}, expected [n, {state}]")),
        }
    };
    let vocab = rows("decoder/embeddings/weight")?;
    let hparams = HParams {
        audio_ctx: rows("encoder/position_encodings/encodings")?,
        text_ctx: rows("decoder/position_encodings/encodings")?,
        state,
        audio_heads: m.int("encoder/num_heads")?,
        text_heads: m.int("decoder/num_heads")?,
        audio_layers: m.layers("encoder"),
        text_layers: m.layers("decoder"),
        mels,
    };
    if hparams.audio_layers == 0 || hparams.text_layers == 0 {
        return Err("no encoder or decoder layers found".into());
    }
    let s = state;
    let mut b = Builder {
        model: m,
        state,
        quantize,
        list: Vec::new(),
    };

    b.copy(
        "encoder/position_encodings/encodings",
        "encoder.positional_embedding",
        &[hparams.audio_ctx, s],
        Store::F32,
    )?;
    b.copy(
        "encoder/conv1/weight",
        "encoder.conv1.weight",
        &[s, mels, 3],
        Store::Conv,
    )?;
    b.conv_bias("encoder/conv1/bias", "encoder.conv1.bias")?;
    b.copy(
        "encoder/conv2/weight",
        "encoder.conv2.weight",
        &[s, s, 3],
        Store::Conv,
    )?;
    b.conv_bias("encoder/conv2/bias", "encoder.conv2.bias")?;
    b.layer_norm("encoder/layer_norm", "encoder.ln_post")?;
    for i in 0..hparams.audio_layers {
        let from = format!("encoder/layer_{i}");
        let to = format!("encoder.blocks.{i}");
        b.layer_norm(
            &format!("{from}/self_attention/layer_norm"),
            &format!("{to}.attn_ln"),
        )?;
        b.self_attention(&from, &to)?;
        b.feed_forward(&from, &to, s)?;
    }

    b.copy(
        "decoder/position_encodings/encodings",
        "decoder.positional_embedding",
        &[hparams.text_ctx, s],
        Store::F32,
    )?;
    b.copy(
        "decoder/embeddings/weight",
        "decoder.token_embedding.weight",
        &[vocab, s],
        Store::Weight,
    )?;
    b.layer_norm("decoder/layer_norm", "decoder.ln")?;
    for i in 0..hparams.text_layers {
        let from = format!("decoder/layer_{i}");
        let to = format!("decoder.blocks.{i}");
        b.layer_norm(
            &format!("{from}/self_attention/layer_norm"),
            &format!("{to}.attn_ln"),
        )?;
        b.self_attention(&from, &to)?;
        // Cross-attention: query alone, then key and value fused (key bias dropped).
        b.layer_norm(
            &format!("{from}/attention/layer_norm"),
            &format!("{to}.cross_attn_ln"),
        )?;
        b.linear(
            &format!("{from}/attention/linear_0"),
            &format!("{to}.cross_attn.query"),
            s,
            s,
        )?;
        let kv = |part: &str| Some(format!("{to}.cross_attn.{part}"));
        b.split(
            &format!("{from}/attention/linear_1/weight"),
            &[kv("key.weight"), kv("value.weight")],
            Store::Weight,
        )?;
        b.split(
            &format!("{from}/attention/linear_1/bias"),
            &[None, kv("value.bias")],
            Store::F32,
        )?;
        b.linear(
            &format!("{from}/attention/linear_2"),
            &format!("{to}.cross_attn.out"),
            s,
            s,
        )?;
        b.feed_forward(&from, &to, s)?;
    }
    Ok(WhisperTensors {
        hparams,
        vocab,
        list: b.list,
    })
}

/// Encodes values in their ggml storage type.
fn encode(values: &[f32], dims: &[usize], store: Store, quantize: Quantize) -> (i32, Vec<u8>) {
    let f16_bytes = |values: &[f32]| -> Vec<u8> {
        values
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect()
    };
    let row = dims.last().copied().unwrap_or(1);
    match store {
        Store::F32 => (
            GGML_TYPE_F32,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        Store::Conv => (GGML_TYPE_F16, f16_bytes(values)),
        Store::Weight => match quantize {
            Quantize::Q8_0 if row % Q8_0_BLOCK == 0 => (GGML_TYPE_Q8_0, q8_0(values)),
            _ => (GGML_TYPE_F16, f16_bytes(values)),
        },
    }
}

/// ggml's Q8_0: blocks of 32 values, an f16 scale `d = max|x| / 127`, then 32 `i8`
/// `round(x / d)` (as `quantize_row_q8_0_ref`).
fn q8_0(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() / Q8_0_BLOCK * (2 + Q8_0_BLOCK));
    for block in values.chunks(Q8_0_BLOCK) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        for &v in block {
            out.push((v * id).round() as i8 as u8);
        }
    }
    out
}

/// The regular tokens of `vocabulary.txt` as bytes: every line before the first special
/// token (`<|endoftext|>`), each GPT-2 byte-level character mapped back to its byte.
fn regular_tokens(text: &str, path: &Path) -> Result<Vec<Vec<u8>>, ImportError> {
    let decoder = byte_decoder();
    let mut tokens = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line == "<|endoftext|>" {
            return Ok(tokens);
        }
        let mut bytes = Vec::with_capacity(line.len());
        for c in line.chars() {
            let Some(&b) = decoder.get(&c) else {
                return Err(ImportError::Vocabulary {
                    path: path.to_path_buf(),
                    line: i + 1,
                    message: format!(
                        "{c:?} is not a GPT-2 byte-level character: this is not a Whisper vocabulary"
                    ),
                });
            };
            bytes.push(b);
        }
        tokens.push(bytes);
    }
    Err(ImportError::Vocabulary {
        path: path.to_path_buf(),
        line: text.lines().count(),
        message: "no <|endoftext|> token: this is not a Whisper vocabulary (or it is truncated)"
            .into(),
    })
}

/// GPT-2's `bytes_to_unicode`, reversed: printable Latin-1 bytes stand for themselves,
/// the other 68 bytes for code points from U+0100 on, in byte order.
fn byte_decoder() -> HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut map = HashMap::with_capacity(256);
    let mut next = 256u32;
    for b in 0..=255u8 {
        let c = if printable(b) {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or(char::REPLACEMENT_CHARACTER);
            next += 1;
            c
        };
        map.insert(c, b);
    }
    map
}

/// Whisper's mel filterbank (librosa `filters.mel(sr, n_fft, n_mels)` defaults: Slaney
/// mel scale, Slaney area normalisation), row-major `n_mels x (n_fft / 2 + 1)`.
pub fn mel_filters(n_mels: usize, n_fft: usize, sample_rate: f64) -> Vec<f32> {
    let bins = n_fft / 2 + 1;
    let fft_freqs: Vec<f64> = (0..bins)
        .map(|i| i as f64 * sample_rate / n_fft as f64)
        .collect();
    let max_mel = hz_to_mel(sample_rate / 2.0);
    let mel_f: Vec<f64> = (0..n_mels + 2)
        .map(|i| mel_to_hz(max_mel * i as f64 / (n_mels + 1) as f64))
        .collect();
    let mut weights = vec![0f32; n_mels * bins];
    for m in 0..n_mels {
        let (lo, mid, hi) = (mel_f[m], mel_f[m + 1], mel_f[m + 2]);
        let norm = 2.0 / (hi - lo);
        for (k, &f) in fft_freqs.iter().enumerate() {
            let lower = (f - lo) / (mid - lo);
            let upper = (hi - f) / (hi - mid);
            weights[m * bins + k] = (lower.min(upper).max(0.0) * norm) as f32;
        }
    }
    weights
}

/// The Slaney mel scale: linear below 1 kHz, logarithmic above.
fn hz_to_mel(hz: f64) -> f64 {
    const F_SP: f64 = 200.0 / 3.0;
    const MIN_LOG_HZ: f64 = 1000.0;
    let log_step = 6.4f64.ln() / 27.0;
    if hz >= MIN_LOG_HZ {
        MIN_LOG_HZ / F_SP + (hz / MIN_LOG_HZ).ln() / log_step
    } else {
        hz / F_SP
    }
}

fn mel_to_hz(mel: f64) -> f64 {
    const F_SP: f64 = 200.0 / 3.0;
    const MIN_LOG_HZ: f64 = 1000.0;
    let min_log_mel = MIN_LOG_HZ / F_SP;
    let log_step = 6.4f64.ln() / 27.0;
    if mel >= min_log_mel {
        MIN_LOG_HZ * (log_step * (mel - min_log_mel)).exp()
    } else {
        mel * F_SP
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_tokens_become_bytes() {
        let d = byte_decoder();
        assert_eq!(d.len(), 256);
        let decode = |s: &str| s.chars().map(|c| d[&c]).collect::<Vec<u8>>();
        assert_eq!(decode("Ġthe"), b" the");
        assert_eq!(decode("ĊĊ"), b"\n\n");
        assert_eq!(decode("Ã©"), "é".as_bytes());
        let tokens = regular_tokens(
            "a\nĠb\n<|endoftext|>\n<|startoftranscript|>\n",
            Path::new("v"),
        )
        .unwrap();
        assert_eq!(tokens, vec![b"a".to_vec(), b" b".to_vec()]);
    }

    #[test]
    fn mel_filters_are_slaney_triangles() {
        let f = mel_filters(80, 400, 16_000.0);
        assert_eq!(f.len(), 80 * 201);
        assert!(f.iter().all(|&v| v >= 0.0));
        // The first band rises from 0 Hz to ~37 Hz and falls to ~74 Hz: bin 1 (40 Hz)
        // sits just past its peak; Slaney normalisation divides by the band's width.
        let lo = 0.0;
        let mid = mel_to_hz(hz_to_mel(8000.0) / 81.0);
        let hi = mel_to_hz(2.0 * hz_to_mel(8000.0) / 81.0);
        let expected = (hi - 40.0) / (hi - mid) * 2.0 / (hi - lo);
        assert!(
            (f64::from(f[1]) - expected).abs() < 1e-7,
            "{} vs {expected}",
            f[1]
        );
        // The scale is linear to 1 kHz and logarithmic above, continuously.
        assert!((mel_to_hz(hz_to_mel(1000.0)) - 1000.0).abs() < 1e-9);
        assert!((hz_to_mel(1000.0) - 15.0).abs() < 1e-12);
        assert!((mel_to_hz(hz_to_mel(6400.0)) - 6400.0).abs() < 1e-6);
        // Every band has a peak, higher bands are wider (lower peaks).
        let peak = |m: usize| {
            f[m * 201..(m + 1) * 201]
                .iter()
                .cloned()
                .fold(0.0, f32::max)
        };
        assert!((0..80).all(|m| peak(m) > 0.0));
        assert!(peak(79) < peak(40));
    }

    #[test]
    fn q8_0_blocks_match_ggml() {
        let values: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) / 10.0).collect();
        let q = q8_0(&values);
        assert_eq!(q.len(), 2 * 34);
        let d = f16::from_le_bytes([q[0], q[1]]).to_f32();
        assert!((d - 2.0 / 127.0).abs() < 1e-4);
        // -2.0 is the block's largest magnitude: -127.
        assert_eq!(q[2] as i8, -127);
        for (i, &v) in values[..32].iter().enumerate() {
            let back = f32::from(q[2 + i] as i8) * d;
            assert!((back - v).abs() <= d / 2.0 + 1e-6, "{i}: {back} vs {v}");
        }
    }

    fn ct2_file(variables: &[(&str, &[usize], u8, Vec<u8>)]) -> Vec<u8> {
        let mut b = Vec::new();
        let string = |b: &mut Vec<u8>, s: &str| {
            b.extend_from_slice(&(s.len() as u16 + 1).to_le_bytes());
            b.extend_from_slice(s.as_bytes());
            b.push(0);
        };
        b.extend_from_slice(&6u32.to_le_bytes());
        string(&mut b, "WhisperSpec");
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&(variables.len() as u32).to_le_bytes());
        for (name, shape, dtype, data) in variables {
            string(&mut b, name);
            b.push(shape.len() as u8);
            for d in *shape {
                b.extend_from_slice(&(*d as u32).to_le_bytes());
            }
            b.push(*dtype);
            b.extend_from_slice(&(data.len() as u32).to_le_bytes());
            b.extend_from_slice(data);
        }
        b.extend_from_slice(&1u32.to_le_bytes());
        string(&mut b, "alias");
        string(&mut b, "w");
        b
    }

    #[test]
    fn model_bin_parses_and_int8_weights_are_scaled_back() {
        let q: Vec<u8> = [10i8, -20, 30, 40].iter().map(|&v| v as u8).collect();
        let scale: Vec<u8> = [10.0f32, 20.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let bytes = ct2_file(&[
            ("w", &[2, 2], 1, q),
            ("w_scale", &[2], 0, scale),
            ("n", &[], 2, 6i16.to_le_bytes().to_vec()),
        ]);
        let m = Ct2Model::parse(&bytes).unwrap();
        assert_eq!(m.spec, "WhisperSpec");
        let (shape, values) = m.floats("w").unwrap();
        assert_eq!(shape, vec![2, 2]);
        assert_eq!(values, vec![1.0, -2.0, 1.5, 2.0]);
        assert_eq!(m.floats("alias").unwrap().1, values);
        assert_eq!(m.int("n").unwrap(), 6);
        // Every cut of the file is an error, never a panic.
        for cut in 0..bytes.len() {
            assert!(Ct2Model::parse(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        // A size that does not match the shape.
        let bad = ct2_file(&[("w", &[3], 0, vec![0; 8])]);
        assert!(Ct2Model::parse(&bad).unwrap_err().contains("do not hold"));
    }
}
