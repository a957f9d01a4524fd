//! Doc comments of skill files, read from the source text.
//!
//! Rhai's own doc-comment support keeps no positions, and the errors here must point at
//! the exact line and column of a bad tag, so the text is scanned directly: `//!` lines
//! for the class, `///` blocks and the `fn` line they sit on for the functions.

use rhai::Dynamic;

use super::{Example, ValueType, similar_names};

/// A problem in a doc comment, at a 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DocError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

fn err<T>(line: usize, column: usize, message: impl Into<String>) -> Result<T, DocError> {
    Err(DocError {
        line,
        column,
        message: message.into(),
    })
}

/// The text of one doc-comment line, without its marker and the one space after it.
#[derive(Debug, Clone)]
pub(crate) struct DocLine {
    pub line: usize,
    /// Column of the first character of `text`.
    pub column: usize,
    pub text: String,
}

/// A `fn` line found in the text, with the `///` block right above it.
#[derive(Debug, Clone)]
pub(crate) struct FnLine {
    pub name: String,
    pub line: usize,
    /// Column of the function's name.
    pub column: usize,
    pub private: bool,
    /// Parameter names with their columns, as written.
    pub params: Vec<(String, usize)>,
    pub doc: Vec<DocLine>,
}

/// What a scan of a file's text finds.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub module: Vec<DocLine>,
    pub fns: Vec<FnLine>,
}

/// Finds `//!` lines, `fn` lines and their `///` blocks.
///
/// Rhai only allows `fn` at the top level of a file, so a line that starts with `fn`
/// (or `private fn`) is a definition; Rhai itself rejects a `///` block that is not
/// directly followed by one.
pub(crate) fn scan(text: &str) -> Scan {
    let mut scan = Scan::default();
    let mut pending: Vec<DocLine> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let indent = raw.chars().take_while(|c| c.is_whitespace()).count();
        let trimmed = raw.trim_start();
        if let Some(rest) = trimmed.strip_prefix("//!") {
            scan.module.push(doc_line(line, indent + 3, rest));
        } else if let Some(rest) = trimmed.strip_prefix("///").filter(|r| !r.starts_with('/')) {
            pending.push(doc_line(line, indent + 3, rest));
        } else if let Some(mut f) = fn_line(line, indent, trimmed) {
            f.doc = std::mem::take(&mut pending);
            scan.fns.push(f);
        } else if !trimmed.is_empty() {
            // Blank lines between a doc block and its `fn` are forgiven.
            pending.clear();
        }
    }
    scan
}

fn doc_line(line: usize, marker_end: usize, rest: &str) -> DocLine {
    let (skip, text) = match rest.strip_prefix(' ') {
        Some(text) => (1, text),
        None => (0, rest),
    };
    DocLine {
        line,
        column: marker_end + skip + 1,
        text: text.trim_end().to_string(),
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The `fn` (or `private fn`) line in `trimmed`, if it is one.
pub(crate) fn fn_line(line: usize, indent: usize, trimmed: &str) -> Option<FnLine> {
    let (private, after) = match trimmed.strip_prefix("private") {
        Some(rest) if rest.starts_with(char::is_whitespace) => (true, rest.trim_start()),
        _ => (false, trimmed),
    };
    let rest = after.strip_prefix("fn")?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let name_part = rest.trim_start();
    let name_col = indent + (trimmed.len() - name_part.len()) + 1;
    let name: String = name_part
        .chars()
        .take_while(|&c| is_ident_char(c))
        .collect();
    if name.is_empty() {
        return None;
    }
    let mut params = Vec::new();
    let after_name = name_part[name.len()..].trim_start();
    if let Some(list) = after_name.strip_prefix('(') {
        let list_start = indent + (trimmed.len() - list.len());
        let end = list.find(')').unwrap_or(list.len());
        let mut offset = 0;
        for piece in list[..end].split(',') {
            let lead = piece.len() - piece.trim_start().len();
            let param = piece.trim();
            if !param.is_empty() {
                params.push((param.to_string(), list_start + offset + lead + 1));
            }
            offset += piece.len() + 1;
        }
    }
    Some(FnLine {
        name,
        line,
        column: name_col,
        private,
        params,
        doc: Vec::new(),
    })
}

/// The class-level documentation (`//!` lines).
#[derive(Debug, Clone, Default)]
pub(crate) struct ModuleDoc {
    /// `@class` name with its line and column.
    pub class: Option<(String, usize, usize)>,
    pub summary: String,
    pub description: String,
    pub examples: Vec<Example>,
    /// `@remote`: other devices may call every function of the class that does not ask
    /// for confirmation.
    pub remote: bool,
}

const MODULE_TAGS: [&str; 3] = ["class", "example", "remote"];
const FN_TAGS: [&str; 6] = [
    "param", "return", "request", "confirm", "no_model", "remote",
];

/// The line with leading blanks moved into its column, so tags may be indented.
fn normalized(line: &DocLine) -> DocLine {
    let text = line.text.trim_start();
    DocLine {
        line: line.line,
        column: line.column + line.text[..line.text.len() - text.len()].chars().count(),
        text: text.to_string(),
    }
}

/// Splits `@tag rest` into the tag name, its column and the rest (`doc` normalized).
fn tag(doc: &DocLine) -> Option<(&str, usize, &str)> {
    let body = doc.text.strip_prefix('@')?;
    let name_len = body.find(|c: char| !is_ident_char(c)).unwrap_or(body.len());
    Some((&body[..name_len], doc.column, body[name_len..].trim()))
}

fn unknown_tag<T>(doc: &DocLine, name: &str, known: &[&str]) -> Result<T, DocError> {
    let known_list = known
        .iter()
        .map(|t| format!("@{t}"))
        .collect::<Vec<_>>()
        .join(", ");
    let hint = match similar_names(name, known.iter().copied()).first() {
        Some(best) => format!("did you mean `@{best}`?"),
        None => format!("known tags here are {known_list}"),
    };
    err(
        doc.line,
        doc.column,
        format!("unknown tag `@{name}`; {hint}"),
    )
}

/// Parses the `//!` lines: summary, description, `@class`, `@example`s.
pub(crate) fn parse_module(lines: &[DocLine]) -> Result<ModuleDoc, DocError> {
    let mut doc = ModuleDoc::default();
    let mut paragraphs: Vec<Vec<&str>> = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    // The example whose code the following lines are, with the line that opened it.
    let mut open_example: Option<usize> = None;
    let mut example_lines: Vec<(usize, Vec<&str>)> = Vec::new();
    for raw in lines {
        let line = &normalized(raw);
        if let Some((name, column, rest)) = tag(line) {
            if !current.is_empty() {
                paragraphs.push(std::mem::take(&mut current));
            }
            match name {
                "class" => {
                    open_example = None;
                    let valid = rest.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                        && rest.chars().all(is_ident_char);
                    if !valid {
                        return err(
                            line.line,
                            column,
                            format!(
                                "`@class` needs a name made of letters, digits and `_`, got `{rest}`; write e.g. `//! @class TimerSkill`"
                            ),
                        );
                    }
                    if doc.class.is_some() {
                        return err(line.line, column, "second `@class`; a file holds one class");
                    }
                    let rest_column =
                        line.column + line.text.chars().count() - rest.chars().count();
                    doc.class = Some((rest.to_string(), line.line, rest_column));
                }
                "example" => {
                    if rest.is_empty() {
                        return err(
                            line.line,
                            column,
                            "`@example` needs the request text, e.g. `//! @example Set a timer for five minutes`",
                        );
                    }
                    doc.examples.push(Example {
                        request: rest.to_string(),
                        code: String::new(),
                    });
                    example_lines.push((line.line, Vec::new()));
                    open_example = Some(example_lines.len() - 1);
                }
                "remote" => {
                    open_example = None;
                    if !rest.is_empty() {
                        return err(line.line, column, "`@remote` takes nothing after it");
                    }
                    doc.remote = true;
                }
                other => return unknown_tag(line, other, &MODULE_TAGS),
            }
            continue;
        }
        match open_example {
            Some(i) => example_lines[i].1.push(&raw.text),
            None if line.text.trim().is_empty() => {
                if !current.is_empty() {
                    paragraphs.push(std::mem::take(&mut current));
                }
            }
            None => current.push(raw.text.trim()),
        }
    }
    if !current.is_empty() {
        paragraphs.push(current);
    }
    for (example, (line, code)) in doc.examples.iter_mut().zip(&example_lines) {
        example.code = code.join("\n").trim_matches('\n').trim_end().to_string();
        if example.code.is_empty() {
            return err(
                *line,
                1,
                format!(
                    "`@example {}` has no code; put the code on the `//!` lines after it",
                    example.request
                ),
            );
        }
    }
    let mut paragraphs = paragraphs.into_iter().map(|p| p.join(" "));
    doc.summary = paragraphs.next().unwrap_or_default();
    if doc.summary.is_empty() {
        let line = lines.first().map_or(1, |l| l.line);
        return err(
            line,
            1,
            "missing class summary; start the file with a `//! One-line summary.` line",
        );
    }
    doc.description = paragraphs.collect::<Vec<_>>().join("\n\n");
    Ok(doc)
}

/// One `@param` line.
#[derive(Debug, Clone)]
pub(crate) struct ParamDoc {
    pub name: String,
    pub line: usize,
    /// Column of the name.
    pub column: usize,
    pub ty: ValueType,
    pub default: Option<serde_json::Value>,
    pub description: String,
}

/// A function's `///` block, parsed but not yet checked against the `fn` line.
#[derive(Debug, Clone, Default)]
pub(crate) struct FnDoc {
    pub summary: String,
    pub docstring: String,
    pub params: Vec<ParamDoc>,
    pub returns: Option<ValueType>,
    pub returns_doc: String,
    /// `@request` lines with where each was written.
    pub requests: Vec<(String, usize, usize)>,
    pub confirm: bool,
    pub no_model: bool,
    /// `@remote`: other devices may call it.
    pub remote: bool,
    /// Where `@remote` was written, for the error when it contradicts `@no_model`.
    pub remote_at: (usize, usize),
}

/// A cursor over one doc line that knows the column of each byte it has consumed.
struct Cursor<'a> {
    text: &'a str,
    pos: usize,
    base_column: usize,
}

impl<'a> Cursor<'a> {
    fn column(&self) -> usize {
        self.base_column + self.text[..self.pos].chars().count()
    }
    fn skip_ws(&mut self) {
        let rest = &self.text[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }
    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }
    fn take_while(&mut self, f: impl Fn(char) -> bool) -> &'a str {
        let rest = self.rest();
        let len = rest.find(|c: char| !f(c)).unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }
    fn eat(&mut self, c: char) -> bool {
        if self.rest().starts_with(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }
    /// A type name: an identifier or `()`.
    fn type_name(&mut self) -> &'a str {
        if self.rest().starts_with("()") {
            self.pos += 2;
            "()"
        } else {
            self.take_while(is_ident_char)
        }
    }
    /// A literal up to the first whitespace outside quotes and brackets.
    fn literal(&mut self) -> &'a str {
        let rest = self.rest();
        let mut depth = 0usize;
        let mut in_string = false;
        let mut escaped = false;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            if in_string {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            match c {
                '"' => in_string = true,
                '[' | '{' | '(' => depth += 1,
                ']' | '}' | ')' => depth = depth.saturating_sub(1),
                c if c.is_whitespace() && depth == 0 => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        self.pos += end;
        &rest[..end]
    }
}

/// Parses a function's `///` block.
pub(crate) fn parse_fn(lines: &[DocLine]) -> Result<FnDoc, DocError> {
    #[derive(PartialEq)]
    enum Last {
        Prose,
        Param,
        Return,
        Request,
        Flag,
    }
    let mut doc = FnDoc::default();
    let mut prose: Vec<&str> = Vec::new();
    let mut last = Last::Prose;
    let lines: Vec<DocLine> = lines.iter().map(normalized).collect();
    for line in &lines {
        if let Some((name, column, rest)) = tag(line) {
            match name {
                "param" => {
                    doc.params.push(parse_param(line)?);
                    last = Last::Param;
                }
                "return" => {
                    if doc.returns.is_some() {
                        return err(
                            line.line,
                            column,
                            "second `@return`; a function returns one value",
                        );
                    }
                    let mut cursor = Cursor {
                        text: &line.text,
                        pos: "@return".len(),
                        base_column: line.column,
                    };
                    cursor.skip_ws();
                    let type_column = cursor.column();
                    let ty_name = cursor.type_name();
                    let Some(ty) = ValueType::parse(ty_name) else {
                        return err(
                            line.line,
                            type_column,
                            format!(
                                "unknown type `{}` in `@return`; use one of {}, ()",
                                if ty_name.is_empty() {
                                    cursor.rest()
                                } else {
                                    ty_name
                                },
                                ValueType::PARAM_NAMES
                            ),
                        );
                    };
                    doc.returns = Some(ty);
                    doc.returns_doc = cursor.rest().trim().to_string();
                    last = Last::Return;
                }
                "request" => {
                    if rest.is_empty() {
                        return err(
                            line.line,
                            column,
                            "`@request` needs what a person would say, e.g. `/// @request put the telly on`",
                        );
                    }
                    doc.requests.push((rest.to_string(), line.line, column));
                    last = Last::Request;
                }
                "confirm" | "no_model" | "remote" => {
                    if !rest.is_empty() {
                        return err(
                            line.line,
                            column,
                            format!("`@{name}` takes nothing after it"),
                        );
                    }
                    match name {
                        "confirm" => doc.confirm = true,
                        "no_model" => doc.no_model = true,
                        _ => {
                            doc.remote = true;
                            doc.remote_at = (line.line, column);
                        }
                    }
                    last = Last::Flag;
                }
                "example" => {
                    return err(
                        line.line,
                        column,
                        "`@example` belongs in the class's `//!` comment, with code; to say how people ask for this function, write `/// @request put the telly on`",
                    );
                }
                other => return unknown_tag(line, other, &FN_TAGS),
            }
            continue;
        }
        let text = line.text.trim();
        match last {
            // An indented or plain line right after a tag continues its description.
            Last::Param if !text.is_empty() => {
                if let Some(p) = doc.params.last_mut() {
                    push_words(&mut p.description, text);
                }
            }
            Last::Return if !text.is_empty() => push_words(&mut doc.returns_doc, text),
            Last::Request if !text.is_empty() => {
                if let Some((request, _, _)) = doc.requests.last_mut() {
                    push_words(request, text);
                }
            }
            _ => {
                last = Last::Prose;
                prose.push(text);
            }
        }
    }
    // The summary is the first paragraph, so a summary wrapped over two `///` lines
    // stays whole; the docstring is everything after it.
    if let Some(first) = prose.iter().position(|l| !l.is_empty()) {
        let end = prose[first..]
            .iter()
            .position(|l| l.is_empty())
            .map_or(prose.len(), |n| first + n);
        doc.summary = prose[first..end].join(" ");
        doc.docstring = prose[end..].join("\n").trim().to_string();
    }
    Ok(doc)
}

fn push_words(target: &mut String, more: &str) {
    if !target.is_empty() {
        target.push(' ');
    }
    target.push_str(more);
}

fn parse_param(line: &DocLine) -> Result<ParamDoc, DocError> {
    let mut cursor = Cursor {
        text: &line.text,
        pos: "@param".len(),
        base_column: line.column,
    };
    cursor.skip_ws();
    let column = cursor.column();
    let name = cursor.take_while(is_ident_char).to_string();
    if name.is_empty() {
        return err(
            line.line,
            column,
            "expected a parameter name after `@param`; write `@param name: type  description`",
        );
    }
    cursor.skip_ws();
    if !cursor.eat(':') {
        return err(
            line.line,
            cursor.column(),
            format!(
                "expected `:` and a type after `@param {name}`; write `@param {name}: int  description`"
            ),
        );
    }
    cursor.skip_ws();
    let type_column = cursor.column();
    let ty_name = cursor.type_name();
    let ty = match ValueType::parse(ty_name) {
        Some(ValueType::Unit) | None => {
            let shown = if ty_name.is_empty() {
                cursor.rest().split_whitespace().next().unwrap_or("")
            } else {
                ty_name
            };
            return err(
                line.line,
                type_column,
                format!(
                    "unknown type `{shown}` in `@param {name}`; use one of {}",
                    ValueType::PARAM_NAMES
                ),
            );
        }
        Some(ty) => ty,
    };
    cursor.skip_ws();
    let mut default = None;
    if cursor.eat('=') {
        cursor.skip_ws();
        let literal_column = cursor.column();
        let literal = cursor.literal();
        let value = parse_default(literal).and_then(|value| check_default(ty, value)).map_err(|why| DocError {
            line: line.line,
            column: literal_column,
            message: format!(
                "bad default `{literal}` for `{name}`: {why}; defaults are literals such as 10, 1.5, true, \"text\", [], #{{}}, ()"
            ),
        })?;
        default = Some(value);
    }
    Ok(ParamDoc {
        name,
        line: line.line,
        column,
        ty,
        default,
        description: cursor.rest().trim().to_string(),
    })
}

/// Evaluates a default literal with a bare engine (no functions, so no side effects).
fn parse_default(literal: &str) -> Result<serde_json::Value, String> {
    if literal.is_empty() {
        return Err("nothing after `=`".to_string());
    }
    let mut engine = rhai::Engine::new_raw();
    engine.set_max_operations(1_000);
    let value: Dynamic = engine
        .eval_expression(literal)
        .map_err(|_| "not a literal".to_string())?;
    super::value::dynamic_to_json(&value)
}

fn check_default(ty: ValueType, value: serde_json::Value) -> Result<serde_json::Value, String> {
    if value.is_null() {
        return Ok(value);
    }
    if ty == ValueType::Float && value.is_i64() {
        let as_float = value.as_f64().unwrap_or_default();
        return Ok(serde_json::Value::from(as_float));
    }
    if ty.accepts(&value) {
        Ok(value)
    } else {
        Err(format!("it is not of type {ty}"))
    }
}
