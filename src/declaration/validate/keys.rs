//! Keys given twice in one JSON object, which a JSON parser would silently resolve to the last.

use super::{join, Problem};
use std::collections::BTreeSet;
use std::fmt;

/// Every key given twice in one object, with its JSON path.
pub(super) fn duplicate_keys(text: &str) -> Vec<Problem> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use std::cell::RefCell;

    struct Walk<'a> {
        path: String,
        found: &'a RefCell<Vec<Problem>>,
    }

    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0;
            while seq
                .next_element_seed(Walk {
                    path: format!("{}[{i}]", self.path),
                    found: self.found,
                })?
                .is_some()
            {
                i += 1;
            }
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = BTreeSet::new();
            while let Some(key) = map.next_key::<String>()? {
                let path = join(&self.path, &key);
                if !seen.insert(key) {
                    self.found.borrow_mut().push(Problem {
                        path: path.clone(),
                        message: "is given twice".into(),
                    });
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                map.next_value_seed(Walk {
                    path,
                    found: self.found,
                })?;
            }
            Ok(())
        }
    }

    let found = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_str(text);
    // The text already parsed as JSON; a walk that fails here only means nothing more to add.
    let _ = Walk {
        path: String::new(),
        found: &found,
    }
    .deserialize(&mut de);
    found.into_inner()
}
