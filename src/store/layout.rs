//! The snapshot's JSON layout: an object's fields one to a line, as `serde_json`'s pretty
//! printer writes them, but each element of a list whole on one line.
//!
//! A store of 10,000 openings holds two lists of 10,000 objects (the declaration's resources and
//! the owned records). Pretty-printed, every field of each took its own indented line: 3.2 MB, a
//! third of it indentation that every read parsed past and every seal hashed. Written a record
//! to a line the same store is two thirds the size, and still reads to a person: `grep` of an id
//! shows its whole record. The bytes are JSON either way, and any earlier layout still reads.

use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};
use std::io::{self, Write};

/// Pretty where no list is open above; compact from a list's element down to its end.
pub struct Layout {
    pretty: PrettyFormatter<'static>,
    compact: CompactFormatter,
    /// Containers open since the list element being written on one line began (0: pretty).
    flat: usize,
    /// The next container begins a list's element.
    element: bool,
}

impl Layout {
    pub fn new() -> Layout {
        Layout {
            pretty: PrettyFormatter::with_indent(b"  "),
            compact: CompactFormatter,
            flat: 0,
            element: false,
        }
    }

    /// A container opens: the element of a pretty list goes flat from here.
    fn open(&mut self) -> bool {
        if self.flat > 0 || std::mem::take(&mut self.element) {
            self.flat += 1;
            true
        } else {
            false
        }
    }

    /// A container closes; whether it was written flat.
    fn close(&mut self) -> bool {
        if self.flat > 0 {
            self.flat -= 1;
            true
        } else {
            false
        }
    }
}

impl Formatter for Layout {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.open() {
            self.compact.begin_array(w)
        } else {
            self.pretty.begin_array(w)
        }
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.close() {
            self.compact.end_array(w)
        } else {
            self.pretty.end_array(w)
        }
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if self.flat > 0 {
            self.compact.begin_array_value(w, first)
        } else {
            self.element = true;
            self.pretty.begin_array_value(w, first)
        }
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.flat > 0 {
            self.compact.end_array_value(w)
        } else {
            // An element that was no container (a string) leaves nothing pending.
            self.element = false;
            self.pretty.end_array_value(w)
        }
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.open() {
            self.compact.begin_object(w)
        } else {
            self.pretty.begin_object(w)
        }
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.close() {
            self.compact.end_object(w)
        } else {
            self.pretty.end_object(w)
        }
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if self.flat > 0 {
            self.compact.begin_object_key(w, first)
        } else {
            self.pretty.begin_object_key(w, first)
        }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.flat > 0 {
            self.compact.begin_object_value(w)
        } else {
            self.pretty.begin_object_value(w)
        }
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.flat > 0 {
            self.compact.end_object_value(w)
        } else {
            self.pretty.end_object_value(w)
        }
    }
}

/// `value` written in the snapshot's layout into `out`.
pub fn write<T: serde::Serialize>(out: &mut Vec<u8>, value: &T) -> serde_json::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(out, Layout::new());
    value.serialize(&mut ser)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(v: &serde_json::Value) -> String {
        let mut out = Vec::new();
        write(&mut out, v).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn fields_go_one_to_a_line_and_each_element_of_a_list_whole_on_one() {
        let v = json!({
            "version": 4,
            "taken": ["a", "b"],
            "declaration": {"node": "n1", "resources": [
                {"type": "opening", "id": "o1", "from": ["10.0.0.0/8", "::1"], "x": {"y": []}},
                {"type": "file", "id": "f1", "content": "line\nline"}
            ]},
            "owned": [{"id": "o1", "shape": "opening"}, [1, [2, {}]], "s", 5, null, []],
            "empty": {},
            "briefing": {"at": "t", "lines": []}
        });
        let t = text(&v);
        // (A `Value`'s keys come sorted; a struct's come in its order.)
        assert_eq!(
            t,
            r#"{
  "briefing": {
    "at": "t",
    "lines": []
  },
  "declaration": {
    "node": "n1",
    "resources": [
      {"from":["10.0.0.0/8","::1"],"id":"o1","type":"opening","x":{"y":[]}},
      {"content":"line\nline","id":"f1","type":"file"}
    ]
  },
  "empty": {},
  "owned": [
    {"id":"o1","shape":"opening"},
    [1,[2,{}]],
    "s",
    5,
    null,
    []
  ],
  "taken": [
    "a",
    "b"
  ],
  "version": 4
}"#
        );
        // The same value read back, whatever the layout.
        assert_eq!(serde_json::from_str::<serde_json::Value>(&t).unwrap(), v);
    }
}
