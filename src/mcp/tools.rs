//! An MCP server's tools as skill functions, and their results as values.
//!
//! A tool's input schema says what a skill's doc comment says: parameters with types,
//! defaults and descriptions. Required parameters come first, in the order of the
//! schema's `required` list (its author's order; the properties object has none we
//! can rely on), then the optional ones by name, so a positional call matches the
//! signature shown. What the server sends is outside input: names that are not
//! identifiers are made into ones, texts are stripped of control characters and
//! shortened to `mcp.max_text_bytes`, and a list over `mcp.max_tools` is refused.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde_json::{Map, Value};

use super::file::ServerSpec;
use crate::skills::{ClassDoc, Param, SkillFunction, ValueType};
use crate::text::{clean_line, clean_text};

/// Most parameters one tool may have: a voice request fills a handful.
pub const MAX_PARAMS: usize = 32;
/// Longest tool or parameter name kept.
pub const MAX_NAME_BYTES: usize = 64;

/// How one function reaches its tool: the tool's own name and its parameters' own
/// names, in the function's order.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The name the server knows the tool by.
    pub tool: String,
    /// The property names, one per parameter.
    pub properties: Vec<String>,
}

impl ToolCall {
    /// The `arguments` object of a `tools/call` from arguments bound to the
    /// function's signature: an optional parameter left at `()` is left out.
    pub fn arguments(&self, f: &SkillFunction, bound: Vec<Value>) -> Map<String, Value> {
        self.properties
            .iter()
            .zip(&f.params)
            .zip(bound)
            .filter(|((_, p), v)| !(v.is_null() && p.default.is_some()))
            .map(|((name, _), v)| (name.clone(), v))
            .collect()
    }
}

/// Text bounds for what a server says about itself.
#[derive(Debug, Clone, Copy)]
pub struct TextLimits {
    /// Tools kept at most (`mcp.max_tools`).
    pub max_tools: usize,
    /// Bytes of one description (`mcp.max_text_bytes`).
    pub max_text_bytes: usize,
}

/// The class a server's tools make, with how each function reaches its tool.
pub fn class(
    spec: &ServerSpec,
    file: &Path,
    title: &str,
    instructions: &str,
    tools: &[Tool],
    limits: TextLimits,
) -> Result<(ClassDoc, BTreeMap<String, ToolCall>), String> {
    if tools.len() > limits.max_tools {
        return Err(format!(
            "it lists {} tools, over the limit of {} (mcp.max_tools)",
            tools.len(),
            limits.max_tools
        ));
    }
    let mut functions = Vec::new();
    let mut calls = BTreeMap::new();
    for tool in tools {
        match function(spec, file, tool, limits) {
            Ok((f, _)) if calls.contains_key(&f.name) => tracing::warn!(
                server = %spec.key,
                tool = %clean_line(&tool.name),
                "left out: another tool is already called `{}` here",
                f.name
            ),
            Ok((f, call)) => {
                calls.insert(f.name.clone(), call);
                functions.push(f);
            }
            Err(why) => {
                tracing::warn!(server = %spec.key, tool = %shorten(&clean_line(&tool.name), MAX_NAME_BYTES), "tool left out: {why}")
            }
        }
    }
    let title = shorten(&clean_line(title), limits.max_text_bytes);
    let summary = if title.is_empty() {
        format!("Tools of the MCP server `{}`.", spec.key)
    } else {
        format!("{title}: tools of the MCP server `{}`.", spec.key)
    };
    let doc = ClassDoc {
        name: spec.class.clone(),
        summary,
        description: shorten(&clean_text(instructions), limits.max_text_bytes),
        examples: Vec::new(),
        functions,
    };
    Ok((doc, calls))
}

fn function(
    spec: &ServerSpec,
    file: &Path,
    tool: &Tool,
    limits: TextLimits,
) -> Result<(SkillFunction, ToolCall), String> {
    if tool.name.len() > MAX_NAME_BYTES {
        return Err(format!("its name is over {MAX_NAME_BYTES} bytes"));
    }
    let name = identifier(&tool.name).ok_or("its name has no letters or digits")?;
    let schema = &tool.input_schema;
    let properties = match schema.get("properties") {
        Some(Value::Object(p)) => p.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err("its input schema's `properties` is not an object".into()),
    };
    if properties.len() > MAX_PARAMS {
        return Err(format!(
            "it has {} parameters, over the limit of {MAX_PARAMS}",
            properties.len()
        ));
    }
    let required: Vec<&str> = match schema.get("required") {
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let mut order: Vec<&String> = Vec::new();
    for r in &required {
        if let Some((key, _)) = properties.get_key_value(*r)
            && !order.contains(&key)
        {
            order.push(key);
        }
    }
    order.extend(
        properties
            .keys()
            .filter(|k| !required.contains(&k.as_str())),
    );
    let mut params = Vec::new();
    let mut seen = HashSet::new();
    for key in &order {
        let param_name = identifier(key).ok_or_else(|| {
            format!(
                "its parameter `{}` has no letters or digits, or a name over {MAX_NAME_BYTES} bytes",
                shorten(&clean_line(key), MAX_NAME_BYTES)
            )
        })?;
        if !seen.insert(param_name.clone()) {
            return Err(format!(
                "two of its parameters are both `{param_name}` here"
            ));
        }
        let prop = &properties[key.as_str()];
        let ty = value_type(prop);
        let default = if required.contains(&key.as_str()) {
            None
        } else {
            Some(
                prop.get("default")
                    .filter(|d| ty.accepts(d) || (ty == ValueType::Float && d.is_i64()))
                    .cloned()
                    .unwrap_or(Value::Null),
            )
        };
        params.push(Param {
            name: param_name,
            ty,
            default,
            description: shorten(&param_text(prop), limits.max_text_bytes),
        });
    }
    let description = tool
        .description
        .as_deref()
        .map(clean_text)
        .or_else(|| tool.title.as_deref().map(clean_text))
        .unwrap_or_default();
    let description = shorten(&description, limits.max_text_bytes);
    let (summary, docstring) = split_summary(&description);
    // With an output schema the result is its structured content, else its text.
    let returns = tool
        .output_schema
        .as_ref()
        .map(|schema| value_type(&Value::Object((**schema).clone())));
    let structured = returns.is_some();
    let f = SkillFunction {
        class: spec.class.clone(),
        name: name.clone(),
        params,
        returns: returns.unwrap_or(ValueType::String),
        returns_doc: if structured {
            "the tool's structured result".into()
        } else {
            "the tool's text".into()
        },
        summary,
        docstring,
        requests: Vec::new(),
        confirm: spec.options.confirm.covers(&tool.name, &name),
        model_callable: true,
        remote: spec.options.remote.covers(&tool.name, &name),
        file: file.to_path_buf(),
        line: 0,
    };
    let call = ToolCall {
        tool: tool.name.to_string(),
        properties: order.into_iter().cloned().collect(),
    };
    Ok((f, call))
}

/// `name` as an identifier: other characters become `_`, `_` leads when it would
/// start with a digit. `None` when nothing of it is a letter or digit.
pub fn identifier(name: &str) -> Option<String> {
    if !name.chars().any(|c| c.is_ascii_alphanumeric()) || name.len() > MAX_NAME_BYTES {
        return None;
    }
    let mut id: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if id.starts_with(|c: char| c.is_ascii_digit()) {
        id.insert(0, '_');
    }
    Some(id)
}

/// The declared type of a property schema; a union (`["string", "null"]`) is its one
/// non-null type, anything else `any`.
fn value_type(prop: &Value) -> ValueType {
    let named = |t: &str| match t {
        "integer" => Some(ValueType::Int),
        "number" => Some(ValueType::Float),
        "boolean" => Some(ValueType::Bool),
        "string" => Some(ValueType::String),
        "array" => Some(ValueType::Array),
        "object" => Some(ValueType::Map),
        _ => None,
    };
    match prop.get("type") {
        Some(Value::String(t)) => named(t).unwrap_or(ValueType::Any),
        Some(Value::Array(types)) => {
            let real: Vec<&str> = types
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect();
            match real.as_slice() {
                [one] => named(one).unwrap_or(ValueType::Any),
                _ => ValueType::Any,
            }
        }
        _ => ValueType::Any,
    }
}

/// A parameter's description with what its schema adds: the allowed values, a format.
fn param_text(prop: &Value) -> String {
    let mut text = prop
        .get("description")
        .and_then(Value::as_str)
        .map(clean_line)
        .unwrap_or_default();
    if let Some(Value::Array(values)) = prop.get("enum") {
        let listed: Vec<String> = values.iter().take(32).map(Value::to_string).collect();
        if !text.is_empty() && !text.ends_with('.') {
            text.push('.');
        }
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&format!("One of {}.", clean_line(&listed.join(", "))));
    }
    if let Some(format) = prop.get("format").and_then(Value::as_str) {
        text.push_str(&format!(" ({})", clean_line(format)));
    }
    text.trim().to_string()
}

/// The first sentence or line, and the rest.
fn split_summary(text: &str) -> (String, String) {
    let text = text.trim();
    let line_end = text.find('\n').unwrap_or(text.len());
    let sentence_end = text[..line_end].find(". ").map_or(line_end, |i| i + 1);
    (
        text[..sentence_end].trim().to_string(),
        text[sentence_end..].trim().to_string(),
    )
}

/// `text` cut to at most `max` bytes at a character boundary, with `…` when cut.
pub fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// What a tool result becomes for the script: its structured content when the
/// server gives one, else its text (the text blocks joined by newlines; other blocks
/// named, since a voice assistant cannot show an image).
pub fn value(result: &CallToolResult) -> Value {
    if let Some(structured) = &result.structured_content {
        return structured.clone();
    }
    Value::String(text(result))
}

/// The text of a result: its text blocks, and a note for each other block.
pub fn text(result: &CallToolResult) -> String {
    let parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => format!("[an image, {}]", i.mime_type),
            ContentBlock::Audio(a) => format!("[a sound, {}]", a.mime_type),
            ContentBlock::ResourceLink(r) => format!("[a resource: {}]", r.uri),
            ContentBlock::Resource(r) => match &r.resource {
                rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
                other => format!("[a resource: {}]", resource_uri(other)),
            },
            _ => "[content of a kind this spoke does not read]".to_string(),
        })
        .collect();
    parts.join("\n")
}

fn resource_uri(r: &rmcp::model::ResourceContents) -> &str {
    match r {
        rmcp::model::ResourceContents::TextResourceContents { uri, .. }
        | rmcp::model::ResourceContents::BlobResourceContents { uri, .. } => uri,
        _ => "(no address)",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::mcp::file::{Options, Tools, Transport};

    fn spec() -> ServerSpec {
        ServerSpec {
            key: "time".into(),
            class: "Time".into(),
            transport: Transport::Http {
                url: "http://x".into(),
                headers: BTreeMap::new(),
            },
            options: Options {
                confirm: Tools::Named(vec!["convert-time".into()]),
                ..Options::default()
            },
        }
    }

    fn tool(name: &str, schema: Value) -> Tool {
        let Value::Object(schema) = schema else {
            panic!("schema must be an object")
        };
        Tool::new(
            name.to_string(),
            "Convert a time. Between zones.",
            Arc::new(schema),
        )
    }

    const LIMITS: TextLimits = TextLimits {
        max_tools: 4,
        max_text_bytes: 200,
    };

    #[test]
    fn a_schema_becomes_a_signature_required_first() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "a-zone": {"type": "string", "description": "Where", "enum": ["UTC", "CET"]},
                "time": {"type": "string", "description": "HH:MM"},
                "steps": {"type": "integer", "default": 5},
                "ratio": {"type": ["number", "null"]}
            },
            "required": ["time", "a-zone"]
        });
        let (doc, calls) = class(
            &spec(),
            Path::new("f.json"),
            "Time",
            "",
            &[tool("convert-time", schema)],
            LIMITS,
        )
        .unwrap();
        let f = &doc.functions[0];
        assert_eq!(
            f.signature(),
            "convert_time(time: string, a_zone: string, ratio: float = (), steps: int = 5) -> string"
        );
        assert_eq!(f.summary, "Convert a time.");
        assert_eq!(f.params[1].description, "Where. One of \"UTC\", \"CET\".");
        assert!(f.confirm && !f.remote);
        let call = &calls["convert_time"];
        assert_eq!(call.tool, "convert-time");
        let args = call.arguments(
            f,
            vec![
                Value::from("10:00"),
                Value::from("UTC"),
                Value::Null,
                Value::from(5),
            ],
        );
        assert_eq!(
            Value::Object(args),
            serde_json::json!({"time": "10:00", "a-zone": "UTC", "steps": 5})
        );
    }

    #[test]
    fn too_many_tools_are_refused_and_long_texts_cut() {
        let many: Vec<Tool> = (0..5)
            .map(|i| tool(&format!("t{i}"), serde_json::json!({})))
            .collect();
        let error = class(&spec(), Path::new("f"), "", "", &many, LIMITS).unwrap_err();
        assert!(error.contains("mcp.max_tools"), "{error}");
        let long = "x".repeat(1000);
        let (doc, _) = class(&spec(), Path::new("f"), "", &long, &many[..1], LIMITS).unwrap();
        assert!(doc.description.len() <= LIMITS.max_text_bytes);
    }
}
