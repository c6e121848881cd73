//! Validation of a release (`"release": true`): the controller's last word to a node, which names
//! nothing.

use super::{Source, Walker};
use serde_json::{Map, Value};

impl Walker {
    /// A release (`"release": true`) is the controller's word and names nothing: it comes from
    /// the link only, with no resource and no module taken, so that nothing declared is ever
    /// removed by a release nor a release mistaken for a declaration.
    pub(super) fn release(&mut self, map: &Map<String, Value>, source: Source) {
        if source != Source::Link {
            self.err(
                "release",
                format!(
                    "a release is accepted from the link only (the controller's word), not from \
                     source {}",
                    source.as_str()
                ),
            );
        }
        if map
            .get("resources")
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty())
        {
            self.err(
                "resources",
                "a release names nothing: it must list no resources",
            );
        }
        if map
            .get("taken")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty())
        {
            self.err("taken", "a release names nothing: it must take no module");
        }
    }
}
