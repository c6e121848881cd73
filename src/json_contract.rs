//! The JSON contract: every document a command prints with `--json` carries `schema_version`,
//! its kind as `document`, a `status` and the process's `exit_code` beside the command's own keys, as
//! `docs/json/schema.json` describes; and a small validator of that schema (the subset of JSON
//! Schema draft 2020-12 the file uses), so the tests check every command's output against the
//! same file the docs publish.

use serde::Serialize;
use serde_json::{Map, Value};

/// The version of the documents' shape: raised when a key is removed or changes its meaning
/// (adding a key does not raise it).
pub const SCHEMA_VERSION: u64 = 1;

/// The schema every `--json` document is checked against, as published in `docs/json/`.
pub const SCHEMA: &str = include_str!("../docs/json/schema.json");

/// What a document says of the command's end, one word a script branches on; made from the exit
/// code in one place ([`Status::of_exit`]), so the two never disagree.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Done as asked (exit 0); for a preview, nothing would change.
    Ok,
    /// A preview whose act would change something (exit 4); nothing was changed.
    Changes,
    /// Refused before anything changed: input, a safety rule, another resident host (exit 2,
    /// 3, 6).
    Refused,
    /// Failed part-way, or the host could not work (exit 1).
    Failed,
    /// Applied to its end, but the briefing says failed: something declared is not in force
    /// (exit 5).
    NotInForce,
    /// `--confirm`: the kernel disagrees with the evaluator (exit 7).
    Disagrees,
    /// Stopped by SIGINT or SIGTERM (exit 130, 143).
    Interrupted,
}

impl Status {
    /// The status of a command that exits `code`.
    pub fn of_exit(code: u8) -> Status {
        match code {
            0 => Status::Ok,
            4 => Status::Changes,
            2 | 3 | 6 => Status::Refused,
            5 => Status::NotInForce,
            7 => Status::Disagrees,
            128.. => Status::Interrupted,
            _ => Status::Failed,
        }
    }
}

/// The document of `kind` for `body` (an object whose keys it carries, or any other value put
/// under `kind`'s own name), with the contract's keys (`schema_version`, `document`, `status`,
/// `exit_code`). A body key of the same name as one of them is a bug (its value would be lost):
/// a debug build panics on it, so every test that prints a document checks it.
pub fn document(kind: &str, code: u8, body: &impl Serialize) -> Value {
    let mut out = Map::new();
    out.insert("schema_version".into(), SCHEMA_VERSION.into());
    out.insert("document".into(), kind.into());
    out.insert(
        "status".into(),
        serde_json::to_value(Status::of_exit(code)).unwrap_or(Value::Null),
    );
    out.insert("exit_code".into(), code.into());
    match serde_json::to_value(body) {
        Ok(Value::Object(m)) => {
            for (k, v) in m {
                debug_assert!(
                    !out.contains_key(&k),
                    "{kind}'s own key {k} is one of the contract's"
                );
                out.entry(k).or_insert(v);
            }
        }
        Ok(other) => {
            out.insert(kind.to_string(), other);
        }
        Err(e) => {
            out.insert(
                "error".into(),
                serde_json::json!({"exit_code": code, "message": e.to_string()}),
            );
        }
    }
    Value::Object(out)
}

/// Prints [`document`] on standard output, pretty, one document.
pub fn print(kind: &str, code: u8, body: &impl Serialize) -> anyhow::Result<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(&document(kind, code, body))?
    );
    Ok(())
}

/// Checks `doc` against the published schema; every problem found, each with its JSON path.
pub fn check(doc: &Value) -> Result<(), Vec<String>> {
    let schema: Value = serde_json::from_str(SCHEMA)
        .map_err(|e| vec![format!("docs/json/schema.json is not JSON: {e}")])?;
    let mut problems = Vec::new();
    Validator { root: &schema }.at(&schema, doc, "$", &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// The keywords of draft 2020-12 the schema file uses: `type`, `const`, `enum`, `required`,
/// `properties`, `items`, `minimum`, `maximum`, `$ref` (within the file), `allOf`, `anyOf`,
/// `if`/`then`. Any other keyword in the file is refused, so the file cannot say more than is
/// checked.
struct Validator<'a> {
    root: &'a Value,
}

const KNOWN: [&str; 18] = [
    "$schema",
    "$id",
    "$defs",
    "title",
    "description",
    "type",
    "const",
    "enum",
    "required",
    "properties",
    "items",
    "minimum",
    "maximum",
    "$ref",
    "allOf",
    "anyOf",
    "if",
    "then",
];

impl Validator<'_> {
    fn at(&self, schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
        let Some(s) = schema.as_object() else {
            if schema == &Value::Bool(false) {
                out.push(format!("{path}: no value is allowed here"));
            }
            return;
        };
        for k in s.keys() {
            if !KNOWN.contains(&k.as_str()) {
                out.push(format!("schema keyword {k:?} at {path} is not checked"));
            }
        }
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            match r
                .strip_prefix("#/$defs/")
                .and_then(|name| self.root.get("$defs").and_then(|d| d.get(name)))
            {
                Some(target) => self.at(target, v, path, out),
                None => out.push(format!("{path}: reference {r} is not in the schema")),
            }
        }
        if let Some(t) = s.get("type") {
            let types: Vec<&str> = match t {
                Value::String(one) => vec![one.as_str()],
                Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !types.iter().any(|t| is_type(v, t)) {
                out.push(format!(
                    "{path}: {} is not {}",
                    kind_of(v),
                    types.join(" or ")
                ));
                return;
            }
        }
        if let Some(c) = s.get("const") {
            if c != v {
                out.push(format!("{path}: {v} is not {c}"));
            }
        }
        if let Some(e) = s.get("enum").and_then(Value::as_array) {
            if !e.contains(v) {
                out.push(format!(
                    "{path}: {v} is not one of {}",
                    Value::Array(e.clone())
                ));
            }
        }
        if let Some(n) = v.as_f64() {
            if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
                if n < min {
                    out.push(format!("{path}: {n} is below {min}"));
                }
            }
            if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
                if n > max {
                    out.push(format!("{path}: {n} is above {max}"));
                }
            }
        }
        if let Some(obj) = v.as_object() {
            for k in s
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !obj.contains_key(k) {
                    out.push(format!("{path}: key {k:?} is missing"));
                }
            }
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, sub) in props {
                    if let Some(child) = obj.get(k) {
                        self.at(sub, child, &format!("{path}.{k}"), out);
                    }
                }
            }
        }
        if let (Some(items), Some(arr)) = (s.get("items"), v.as_array()) {
            for (i, child) in arr.iter().enumerate() {
                self.at(items, child, &format!("{path}[{i}]"), out);
            }
        }
        for sub in s
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.at(sub, v, path, out);
        }
        if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
            let mut all = Vec::new();
            let passes = any.iter().any(|sub| {
                let mut p = Vec::new();
                self.at(sub, v, path, &mut p);
                let ok = p.is_empty();
                all.extend(p);
                ok
            });
            if !passes {
                out.push(format!("{path}: none of anyOf holds ({})", all.join("; ")));
            }
        }
        if let (Some(cond), Some(then)) = (s.get("if"), s.get("then")) {
            let mut p = Vec::new();
            self.at(cond, v, path, &mut p);
            if p.is_empty() {
                self.at(then, v, path, out);
            }
        }
    }
}

fn is_type(v: &Value, t: &str) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_u64() || v.is_i64(),
        _ => false,
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_status_is_made_from_the_exit_code() {
        for (code, word) in [
            (0, "ok"),
            (1, "failed"),
            (2, "refused"),
            (3, "refused"),
            (4, "changes"),
            (5, "not_in_force"),
            (6, "refused"),
            (7, "disagrees"),
            (130, "interrupted"),
            (143, "interrupted"),
        ] {
            assert_eq!(document("version", code, &json!({}))["status"], word);
        }
    }

    #[test]
    fn the_schema_file_uses_only_the_keywords_the_validator_checks() {
        let schema: Value = serde_json::from_str(SCHEMA).unwrap();
        let mut problems = Vec::new();
        // Walk every sub-schema by validating a value of every shape against each definition:
        // an unknown keyword is reported whatever the value.
        for (name, def) in schema["$defs"].as_object().unwrap() {
            for v in [json!(null), json!({}), json!([]), json!(""), json!(0)] {
                let mut p = Vec::new();
                Validator { root: &schema }.at(def, &v, name, &mut p);
                problems.extend(p.into_iter().filter(|p| p.starts_with("schema keyword")));
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn a_document_missing_a_key_or_with_a_wrong_type_is_refused_naming_the_path() {
        let doc = document(
            "refused",
            2,
            &json!({"refused": {"exit_code": 2, "problems": ["x"], "summary": "s"}}),
        );
        assert_eq!(check(&doc), Ok(()));
        let mut bad = doc.clone();
        bad.as_object_mut().unwrap().remove("status");
        assert_eq!(
            check(&bad),
            Err(vec!["$: key \"status\" is missing".into()])
        );
        let mut bad = doc.clone();
        bad["refused"]["problems"] = json!("x");
        assert_eq!(
            check(&bad),
            Err(vec!["$.refused.problems: a string is not array".into()])
        );
        let mut bad = doc;
        bad["status"] = json!("fine");
        assert!(check(&bad).unwrap_err()[0].starts_with("$.status: \"fine\" is not one of"));
    }

    /// Every example in docs/json.md is a document of the schema, and there is one per command.
    #[test]
    fn every_example_in_the_docs_passes_the_schema() {
        let md = include_str!("../docs/json.md");
        let mut seen = 0;
        for block in md.split("```json\n").skip(1) {
            let text = block.split("\n```").next().unwrap();
            let v: Value = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("an example is not JSON ({e}):\n{text}"));
            if let Err(p) = check(&v) {
                panic!("an example fails the schema: {p:#?}\n{text}");
            }
            seen += 1;
        }
        assert!(seen >= 15, "only {seen} examples in docs/json.md");
    }
}
