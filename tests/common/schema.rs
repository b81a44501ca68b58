//! A small JSON Schema (draft-07) checker for the keywords speedscope's
//! published file-format schema uses: `$ref` into `definitions`, `type`,
//! `properties`, `required`, `items`, `anyOf`, `const` and `enum`. Any
//! other keyword in a schema is refused, so a newer schema cannot be
//! half-checked without notice.

use serde_json::Value;

const KNOWN: &[&str] = &[
    "$schema",
    "$ref",
    "definitions",
    "title",
    "type",
    "properties",
    "required",
    "items",
    "anyOf",
    "const",
    "enum",
];

/// Checks `doc` against `root`; returns every violation with its JSON path.
pub fn validate(root: &Value, doc: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    check(root, root, doc, "$", &mut errors);
    errors
}

fn resolve<'a>(root: &'a Value, reference: &str) -> &'a Value {
    let name = reference
        .strip_prefix("#/definitions/")
        .unwrap_or_else(|| panic!("unsupported $ref {reference}"));
    &root["definitions"][name]
}

fn type_ok(ty: &str, v: &Value) -> bool {
    match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        other => panic!("unsupported type {other}"),
    }
}

fn check(root: &Value, schema: &Value, v: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(s) = schema.as_object() else {
        panic!("schema at {path} is not an object");
    };
    for key in s.keys() {
        assert!(
            KNOWN.contains(&key.as_str()),
            "unsupported schema keyword {key}"
        );
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        check(root, resolve(root, r), v, path, errors);
    }
    if let Some(ty) = s.get("type").and_then(Value::as_str) {
        if !type_ok(ty, v) {
            errors.push(format!("{path}: expected {ty}, found {v}"));
            return;
        }
    }
    if let Some(c) = s.get("const") {
        if c != v {
            errors.push(format!("{path}: expected {c}, found {v}"));
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            errors.push(format!("{path}: {v} is not one of {e:?}"));
        }
    }
    if let (Some(req), Some(obj)) = (s.get("required").and_then(Value::as_array), v.as_object()) {
        for r in req {
            let r = r.as_str().expect("required names are strings");
            if !obj.contains_key(r) {
                errors.push(format!("{path}: missing required property {r}"));
            }
        }
    }
    if let (Some(props), Some(obj)) = (
        s.get("properties").and_then(Value::as_object),
        v.as_object(),
    ) {
        for (name, sub) in props {
            if let Some(value) = obj.get(name) {
                check(root, sub, value, &format!("{path}.{name}"), errors);
            }
        }
    }
    if let (Some(items), Some(arr)) = (s.get("items"), v.as_array()) {
        for (i, item) in arr.iter().enumerate() {
            check(root, items, item, &format!("{path}[{i}]"), errors);
        }
    }
    if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
        let ok = any.iter().any(|alt| {
            let mut e = Vec::new();
            check(root, alt, v, path, &mut e);
            e.is_empty()
        });
        if !ok {
            errors.push(format!(
                "{path}: matches none of the {} alternatives",
                any.len()
            ));
        }
    }
}
