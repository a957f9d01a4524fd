//! Rhai values and JSON, the form skill arguments and results travel in.
//!
//! Its own module because both sides of a skill need it: the loader, which calls skill
//! functions with JSON arguments and returns their results as JSON, and the
//! documentation parser, which evaluates `@param` defaults. Neither should reach into
//! the other for it.

use rhai::Dynamic;

/// Converts JSON into a Rhai value (integers stay integers).
pub(super) fn json_to_dynamic(value: &serde_json::Value) -> Dynamic {
    use serde_json::Value as J;
    match value {
        J::Null => Dynamic::UNIT,
        J::Bool(b) => Dynamic::from_bool(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Dynamic::from_int(i),
            None => Dynamic::from_float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Dynamic::from(s.clone()),
        J::Array(items) => Dynamic::from_array(items.iter().map(json_to_dynamic).collect()),
        J::Object(map) => Dynamic::from_map(
            map.iter()
                .map(|(k, v)| (k.as_str().into(), json_to_dynamic(v)))
                .collect(),
        ),
    }
}

/// Converts a Rhai value to JSON; `Err` names what could not be converted.
pub(super) fn dynamic_to_json(value: &Dynamic) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    let value = value.flatten_clone();
    if value.is_unit() {
        return Ok(J::Null);
    }
    if let Ok(b) = value.as_bool() {
        return Ok(J::Bool(b));
    }
    if let Ok(i) = value.as_int() {
        return Ok(J::from(i));
    }
    if let Ok(f) = value.as_float() {
        return serde_json::Number::from_f64(f)
            .map(J::Number)
            .ok_or_else(|| format!("the float {f}"));
    }
    if let Ok(c) = value.as_char() {
        return Ok(J::String(c.to_string()));
    }
    if value.is_string() {
        return Ok(J::String(value.to_string()));
    }
    if value.is_array() {
        let items = value.cast::<rhai::Array>();
        return items
            .iter()
            .map(dynamic_to_json)
            .collect::<Result<Vec<_>, _>>()
            .map(J::Array);
    }
    if value.is_map() {
        let map = value.cast::<rhai::Map>();
        return map
            .iter()
            .map(|(k, v)| dynamic_to_json(v).map(|v| (k.to_string(), v)))
            .collect::<Result<serde_json::Map<_, _>, _>>()
            .map(J::Object);
    }
    if value.is_blob() {
        let blob = value.cast::<rhai::Blob>();
        return Ok(J::Array(blob.into_iter().map(J::from).collect()));
    }
    if value.is_fnptr() {
        return Err("a function pointer".to_string());
    }
    Err(format!("a value of type `{}`", value.type_name()))
}
