//! Binding call arguments to a skill function's documented signature.
//!
//! Arguments come from model-written code or another device, so they are checked
//! before the skill runs, and a mismatch is an error the caller can act on: it names
//! the expected signature, the argument and what was given.

use serde_json::Value;

use super::{SkillFunction, ValueType, similar_names};

/// Arguments that do not fit a function's signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    /// More positional arguments than parameters.
    #[error("{function} expects {signature}: got {given} arguments, it takes at most {max}")]
    TooMany {
        /// `Class.fn`.
        function: String,
        /// The rendered signature.
        signature: String,
        /// How many were given.
        given: usize,
        /// How many it takes.
        max: usize,
    },
    /// A parameter without a default was not given.
    #[error("{function} expects {signature}: argument {position} `{name}` is missing")]
    Missing {
        /// `Class.fn`.
        function: String,
        /// The rendered signature.
        signature: String,
        /// 1-based position of the parameter.
        position: usize,
        /// Its name.
        name: String,
    },
    /// A value of the wrong type.
    #[error(
        "{function} expects {signature}: argument {position} `{name}` must be {expected}, got {got}"
    )]
    WrongType {
        /// `Class.fn`.
        function: String,
        /// The rendered signature.
        signature: String,
        /// 1-based position of the parameter.
        position: usize,
        /// Its name.
        name: String,
        /// The declared type.
        expected: ValueType,
        /// What was given, e.g. `string "loud"`.
        got: String,
    },
    /// A named argument that is not a parameter.
    #[error("{function} expects {signature}: it has no parameter `{name}`{hint}")]
    UnknownName {
        /// `Class.fn`.
        function: String,
        /// The rendered signature.
        signature: String,
        /// The unknown key.
        name: String,
        /// `; did you mean ...?` or empty.
        hint: String,
    },
}

/// Checks `args` against `f`'s signature and returns one value per parameter, in
/// order, with defaults filled in and ints widened where a float is declared.
///
/// `args` are positional, or named when they are exactly one JSON object and either
/// the first parameter is not a `map`/`any` (so the object cannot be meant as that
/// parameter's value) or every key of a non-empty object names a parameter.
pub fn bind(f: &SkillFunction, args: &[Value]) -> Result<Vec<Value>, ArgError> {
    let function = f.qualified_name();
    let signature = f.signature();
    let given: Vec<Option<&Value>> = match named(f, args) {
        Some(object) => {
            for key in object.keys() {
                if !f.params.iter().any(|p| &p.name == key) {
                    let hint = match similar_names(key, f.params.iter().map(|p| p.name.as_str()))
                        .first()
                    {
                        Some(best) => format!("; did you mean `{best}`?"),
                        None => String::new(),
                    };
                    return Err(ArgError::UnknownName {
                        function,
                        signature,
                        name: key.clone(),
                        hint,
                    });
                }
            }
            f.params.iter().map(|p| object.get(&p.name)).collect()
        }
        None => {
            if args.len() > f.params.len() {
                return Err(ArgError::TooMany {
                    function,
                    signature,
                    given: args.len(),
                    max: f.params.len(),
                });
            }
            (0..f.params.len()).map(|i| args.get(i)).collect()
        }
    };
    let mut bound = Vec::with_capacity(f.params.len());
    for (i, (param, value)) in f.params.iter().zip(given).enumerate() {
        let value = match (value, &param.default) {
            (Some(value), _) => value,
            (None, Some(default)) => {
                bound.push(default.clone());
                continue;
            }
            (None, None) => {
                return Err(ArgError::Missing {
                    function,
                    signature,
                    position: i + 1,
                    name: param.name.clone(),
                });
            }
        };
        // `()` as a default marks an optional parameter: an explicit null means "not given".
        let optional_null = value.is_null() && param.default.as_ref().is_some_and(Value::is_null);
        if !param.ty.accepts(value) && !optional_null {
            return Err(ArgError::WrongType {
                function,
                signature,
                position: i + 1,
                name: param.name.clone(),
                expected: param.ty,
                got: describe(value),
            });
        }
        let value = match (param.ty, value.as_i64()) {
            (ValueType::Float, Some(int)) if value.is_i64() => Value::from(int as f64),
            _ => value.clone(),
        };
        bound.push(value);
    }
    Ok(bound)
}

fn named<'a>(f: &SkillFunction, args: &'a [Value]) -> Option<&'a serde_json::Map<String, Value>> {
    let [Value::Object(object)] = args else {
        return None;
    };
    let first_takes_object = f
        .params
        .first()
        .is_some_and(|p| matches!(p.ty, ValueType::Map | ValueType::Any));
    let all_keys_are_params =
        !object.is_empty() && object.keys().all(|k| f.params.iter().any(|p| &p.name == k));
    (!first_takes_object || all_keys_are_params).then_some(object)
}

/// `string "loud"`, `int 5`, `map {...}`: a value's type and a short rendering.
pub(crate) fn describe(value: &Value) -> String {
    let kind = match value {
        Value::Null => return "()".to_string(),
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int",
        Value::Number(_) => "float",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "map",
    };
    let mut shown = value.to_string();
    if shown.chars().count() > 40 {
        shown = shown.chars().take(37).collect::<String>() + "...";
    }
    format!("{kind} {shown}")
}
