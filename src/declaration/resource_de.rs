//! How a [`Resource`] is read: by its `type` field, as serde's internally tagged enum reads it,
//! without first copying the whole object aside when `type` is its first field.
//!
//! serde's derive for `#[serde(tag = "type")]` buffers every field of the object (its strings
//! copied) before it knows which variant it reads, and then reads the variant from the copy. The
//! store writes `type` first (serialization puts the tag first), so a store of 10,000 resources
//! is read here field by field straight into each spec, and only an object whose `type` comes
//! later (a person's file, a parsed document's sorted keys) is buffered, as the derive did.
//! The errors are the derive's: `missing field `type``, `unknown variant …`.

use super::{
    ActionSpec, ContainerSpec, Declaration, DirectorySpec, FileSpec, OpeningSpec, PackageSpec,
    Resource, ServiceSpec, Shape,
};
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Value};
use std::fmt;

impl<'de> Deserialize<'de> for Resource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ResourceVisitor)
    }
}

/// The spec of `shape` read from `d`, wrapped as its variant.
fn spec<'de, D: Deserializer<'de>>(shape: Shape, d: D) -> Result<Resource, D::Error> {
    Ok(match shape {
        Shape::File => Resource::File(FileSpec::deserialize(d)?),
        Shape::Directory => Resource::Directory(DirectorySpec::deserialize(d)?),
        Shape::Service => Resource::Service(ServiceSpec::deserialize(d)?),
        Shape::Package => Resource::Package(PackageSpec::deserialize(d)?),
        Shape::Container => Resource::Container(ContainerSpec::deserialize(d)?),
        Shape::Action => Resource::Action(ActionSpec::deserialize(d)?),
        Shape::Opening => Resource::Opening(OpeningSpec::deserialize(d)?),
    })
}

/// The declaration a parsed document holds, moved out of it: each resource read by
/// [`from_object`] rather than buffered a second time by the variant's reader.
pub(super) fn declaration(mut document: Value) -> Result<Declaration, serde_json::Error> {
    let resources = match document.get_mut("resources") {
        Some(Value::Array(a)) => std::mem::take(a),
        // Anything else is the types' to refuse, below.
        _ => Vec::new(),
    };
    let mut declaration: Declaration = serde_json::from_value(document)?;
    declaration.resources = resources
        .into_iter()
        .map(|r| match r {
            Value::Object(object) => from_object(object),
            other => Resource::deserialize(other),
        })
        .collect::<Result<_, _>>()?;
    Ok(declaration)
}

/// A resource's object taken out of a parsed document: `type` removed, the rest moved into its
/// spec. What a declaration's parse does with each of its resources, whose keys a parsed
/// document keeps sorted (`type` among the last).
pub(super) fn from_object(mut object: Map<String, Value>) -> Result<Resource, serde_json::Error> {
    let Some(tag) = object.remove("type") else {
        return Err(de::Error::missing_field("type"));
    };
    spec(Tag.deserialize(tag)?, Value::Object(object))
}

/// The variants' names, as the derive's errors list them: [`Shape::as_str`] of each.
const VARIANTS: &[&str] = &{
    let mut names = [""; Shape::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = Shape::ALL[i].as_str();
        i += 1;
    }
    names
};

/// The `type` field's value, read as the derive reads its tag: an identifier.
struct Tag;

impl<'de> DeserializeSeed<'de> for Tag {
    type Value = Shape;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Shape, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl Visitor<'_> for Tag {
    type Value = Shape;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("variant identifier")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Shape, E> {
        Shape::from_name(v).ok_or_else(|| E::unknown_variant(v, VARIANTS))
    }
}

struct ResourceVisitor;

impl<'de> Visitor<'de> for ResourceVisitor {
    type Value = Resource;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("internally tagged enum Resource")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Resource, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return Err(de::Error::missing_field("type"));
        };
        if first == "type" {
            let shape = map.next_value_seed(Tag)?;
            return spec(shape, MapAccessDeserializer::new(map));
        }
        // `type` later: every field is kept until it is found, as the derive does.
        let mut object = Map::new();
        object.insert(first, map.next_value::<Value>()?);
        while let Some(key) = map.next_key::<String>()? {
            match object.entry(key) {
                Entry::Vacant(e) => {
                    e.insert(map.next_value::<Value>()?);
                }
                Entry::Occupied(e) => {
                    let key = e.key();
                    return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
                }
            }
        }
        from_object(object).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derive this replaces, kept here to compare with.
    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(tag = "type", rename_all = "lowercase")]
    enum Derived {
        File(FileSpec),
        Directory(DirectorySpec),
        Service(ServiceSpec),
        Package(PackageSpec),
        Container(ContainerSpec),
        Action(ActionSpec),
        Opening(OpeningSpec),
    }

    fn same(text: &str) {
        let ours = serde_json::from_str::<Resource>(text);
        let theirs = serde_json::from_str::<Derived>(text);
        match (&ours, &theirs) {
            (Ok(o), Ok(t)) => assert_eq!(
                serde_json::to_value(o).unwrap(),
                serde_json::to_value(t_as_resource(t)).unwrap(),
                "{text}"
            ),
            // Not an object: refused (the derive also took a sequence, tag first, which no
            // store or declaration ever held; it is refused now).
            (Err(_), _) if !text.starts_with('{') => {}
            (Err(o), Err(t)) => {
                // The same words; where each stopped in the text may differ.
                let words = |e: &serde_json::Error| {
                    let s = e.to_string();
                    s.split(" at line ").next().unwrap().to_string()
                };
                assert_eq!(words(o), words(t), "{text}");
            }
            _ => panic!("{text}: ours {ours:?}, the derive's {theirs:?}"),
        }
        // From a parsed document too (its keys sorted): the same resource or a refusal. (A
        // key given twice is not in a parsed document: the declaration's parse refuses it first.)
        let value: Value = serde_json::from_str(text).unwrap();
        if text.matches("\"type\"").count() > 1 {
            return;
        }
        let from_value = Resource::deserialize(&value);
        assert_eq!(from_value.is_ok(), ours.is_ok(), "{text}");
        if let Value::Object(object) = value {
            let moved = from_object(object);
            assert_eq!(moved.is_ok(), ours.is_ok(), "{text}");
            if let (Ok(m), Ok(o)) = (&moved, &ours) {
                assert_eq!(m, o, "{text}");
            }
        }
    }

    fn t_as_resource(t: &Derived) -> Value {
        let json = |v: Value, tag: &str| {
            let mut v = v;
            v["type"] = tag.into();
            v
        };
        match t {
            Derived::File(s) => json(serde_json::to_value(s).unwrap(), "file"),
            Derived::Directory(s) => json(serde_json::to_value(s).unwrap(), "directory"),
            Derived::Service(s) => json(serde_json::to_value(s).unwrap(), "service"),
            Derived::Package(s) => json(serde_json::to_value(s).unwrap(), "package"),
            Derived::Container(s) => json(serde_json::to_value(s).unwrap(), "container"),
            Derived::Action(s) => json(serde_json::to_value(s).unwrap(), "action"),
            Derived::Opening(s) => json(serde_json::to_value(s).unwrap(), "opening"),
        }
    }

    #[test]
    fn reads_what_the_derive_read_and_refuses_what_it_refused() {
        for text in [
            // `type` first, as the store writes it, and last, as a person may.
            r#"{"type": "opening", "id": "o", "port": 80, "proto": "tcp", "from": "anywhere", "path": "incoming"}"#,
            r#"{"id": "o", "port": 80, "proto": "tcp", "from": "anywhere", "path": "incoming", "type": "opening"}"#,
            r#"{"type": "file", "id": "f", "path": "/etc/x", "content": "a\n"}"#,
            r#"{"path": "/etc/x", "id": "f", "type": "file", "content": "a\n"}"#,
            r#"{"type": "directory", "id": "d", "path": "/srv/d"}"#,
            r#"{"type": "service", "id": "s", "name": "nginx"}"#,
            r#"{"type": "package", "id": "p", "name": "curl"}"#,
            // Refused: no type, an unknown one, one that is not a string, an unknown field
            // before and after the type, a field missing, a type twice, not an object.
            r#"{"id": "o", "port": 80}"#,
            r#"{}"#,
            r#"{"type": "socket", "id": "o"}"#,
            r#"{"id": "o", "type": "socket"}"#,
            r#"{"type": 7, "id": "o"}"#,
            r#"{"type": "opening", "id": "o", "port": 80, "proto": "tcp", "from": "anywhere", "path": "incoming", "extra": 1}"#,
            r#"{"extra": 1, "id": "o", "port": 80, "proto": "tcp", "from": "anywhere", "path": "incoming", "type": "opening"}"#,
            r#"{"type": "opening", "id": "o"}"#,
            r#"{"id": "o", "type": "opening"}"#,
            r#"{"id": "o", "type": "file", "type": "file", "path": "/x", "content": ""}"#,
            r#"["opening"]"#,
            r#"["opening", "o", 80, "tcp", "anywhere", "incoming"]"#,
            r#""opening""#,
        ] {
            same(text);
        }
    }
}
