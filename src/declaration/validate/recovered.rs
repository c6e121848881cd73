//! Validation of `recovered`: the records of what the node owned, as its last apply report gave
//! them to the mesh, handed back with the first declaration after a re-enrolment. Each is checked
//! like the store's own record (id, shape, key, digest), so a record that could not have come from
//! a node is refused with the rest of the document.

use super::values::{check_id, check_module_name, check_path};
use super::{join, type_name, Walker};
use crate::declaration::Shape;
use serde_json::Value;

const RECORD_FIELDS: &[&str] = &[
    "id", "module", "shape", "key", "digest", "found", "parents", "stamp",
];

impl Walker {
    pub(super) fn recovered(&mut self, v: &Value) {
        let Some(items) = v.as_array() else {
            self.err(
                "recovered",
                format!("must be an array of records, found {}", type_name(v)),
            );
            return;
        };
        for (i, item) in items.iter().enumerate() {
            let path = format!("recovered[{i}]");
            let Some(map) = self.object(item, &path, RECORD_FIELDS, &["id", "shape", "key"]) else {
                continue;
            };
            if let Some(id) = self.string(map, "id", &path) {
                self.checked(join(&path, "id"), check_id(id));
            }
            if let Some(m) = self.string(map, "module", &path) {
                self.checked(join(&path, "module"), check_module_name(m));
            }
            self.string(map, "digest", &path);
            self.boolean(map, "found", &path);
            // A file's stamp, as the store kept it (a removal reads the file again regardless).
            if let Some(stamp) = map.get("stamp") {
                if let Err(e) = serde_json::from_value::<crate::beneath::Stamp>(stamp.clone()) {
                    self.err(join(&path, "stamp"), format!("not a file's stamp: {e}"));
                }
            }
            let shape = self.string(map, "shape", &path).and_then(|s| {
                let shape = Shape::from_name(s);
                if shape.is_none() {
                    self.err(join(&path, "shape"), format!("unknown shape {s:?}"));
                }
                shape
            });
            let Some(key) = self.string(map, "key", &path) else {
                continue;
            };
            if matches!(shape, Some(Shape::File | Shape::Directory)) {
                self.checked(join(&path, "key"), check_path(key));
            } else if key.is_empty() || key.chars().any(char::is_control) {
                self.err(join(&path, "key"), format!("not a resource key: {key:?}"));
            }
            // The directories the host made on the way: removed with the record's resource, so
            // each must be a clean path strictly above the record's own key.
            if let Some(parents) = map.get("parents") {
                let at = join(&path, "parents");
                let Some(list) = parents.as_array() else {
                    self.err(
                        at,
                        format!("must be an array of paths, found {}", type_name(parents)),
                    );
                    continue;
                };
                for (j, p) in list.iter().enumerate() {
                    let here = format!("{at}[{j}]");
                    let Some(p) = p.as_str() else {
                        self.err(here, format!("must be a path, found {}", type_name(p)));
                        continue;
                    };
                    if check_path(p).is_err() {
                        self.checked(here, check_path(p));
                    } else if !key.starts_with(&format!("{}/", p.trim_end_matches('/'))) {
                        self.err(here, format!("{p:?} is not a directory above {key:?}"));
                    }
                }
            }
        }
    }
}
