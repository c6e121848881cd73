//! A declaration's text parsed into a JSON document in one pass, with every key given twice in
//! one object named: a JSON parser would silently resolve it to the last.

use super::Problem;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::cell::RefCell;
use std::fmt;

/// The document `text` holds (as `serde_json::from_str` reads it: a key given twice keeps its
/// last value) and every key given twice in it, with its JSON path. Only the paths of keys
/// given twice are ever written out.
pub(super) fn document(text: &str) -> Result<(Value, Vec<Problem>), serde_json::Error> {
    let found = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Build {
        at: At::Root,
        found: Some(&found),
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok((value, found.into_inner()))
}

/// Where a value is in the document: written out as a path only for a key given twice.
#[derive(Clone, Copy)]
enum At<'p> {
    Root,
    Index(&'p At<'p>, usize),
    Key(&'p At<'p>, &'p str),
}

impl At<'_> {
    fn path(&self) -> String {
        match self {
            At::Root => String::new(),
            At::Index(parent, i) => format!("{}[{i}]", parent.path()),
            At::Key(parent, key) => super::join(&parent.path(), key),
        }
    }
}

/// Builds the value at `at`; keys given twice go to `found` (none is looked for inside the
/// value of a key given twice, which is not the one named).
struct Build<'p, 'f> {
    at: At<'p>,
    found: Option<&'f RefCell<Vec<Problem>>>,
}

impl<'de> DeserializeSeed<'de> for Build<'_, '_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Build<'_, '_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        loop {
            let seed = Build {
                at: At::Index(&self.at, items.len()),
                found: self.found,
            };
            match seq.next_element_seed(seed)? {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let twice = object.contains_key(&key);
            let value = map.next_value_seed(Build {
                at: At::Key(&self.at, &key),
                found: self.found.filter(|_| !twice),
            })?;
            if twice {
                if let Some(found) = self.found {
                    found.borrow_mut().push(Problem {
                        path: At::Key(&self.at, &key).path(),
                        message: "is given twice".into(),
                    });
                }
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_serde_json_does_and_names_each_key_given_twice() {
        let text = r#"{"a": 1, "b": [{"x": 1, "x": 2}, {"y": -3, "z": 1.5}], "a": {"k": null, "k": true},
                       "s": "é\n", "big": 18446744073709551615, "t": [[], {}]}"#;
        let (value, found) = document(text).unwrap();
        assert_eq!(value, serde_json::from_str::<Value>(text).unwrap());
        let paths: Vec<_> = found.iter().map(|p| p.path.as_str()).collect();
        // Inside the second `a` nothing is looked for: the key itself is what is named.
        assert_eq!(paths, ["b[0].x", "a"]);
        assert!(found.iter().all(|p| p.message == "is given twice"));
    }

    #[test]
    fn refuses_what_serde_json_refuses_with_its_words() {
        for text in ["{", "[1,]", "{\"a\" 1}", "1 2", "", "{\"a\": 1} x"] {
            let ours = document(text).unwrap_err().to_string();
            let theirs = serde_json::from_str::<Value>(text).unwrap_err().to_string();
            assert_eq!(ours, theirs, "{text:?}");
        }
    }
}
