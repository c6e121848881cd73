//! The store's lists of records, each indexed by what the apply loop looks a record up by, so
//! finding, recording and replacing one costs the same whether the store holds ten records or
//! ten thousand.
//!
//! A list keeps its records in the order they were first recorded (removal of undeclared things
//! walks it backwards, so what was made last goes first) and reads as a slice. Only the store
//! changes it, through [`List::put`] and [`List::remove`], which keep the index true; nothing
//! outside the store can push onto it or retain from it behind the index's back.

use super::{Held, Original, Owned};
use crate::declaration::Shape;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashMap;
use std::ops::Deref;

/// A record kept in one of the store's lists.
pub trait Record: Clone + PartialEq {
    /// What the list calls one of these in an error.
    const WHAT: &'static str;
    /// What the record is unique by, and looked up by.
    fn primary(&self) -> &str;
    /// A second thing it is unique by, when it has one: an owned record's shape and key.
    fn secondary(&self) -> Option<(Shape, &str)> {
        None
    }
}

impl Record for Owned {
    const WHAT: &'static str = "owned resource";
    fn primary(&self) -> &str {
        &self.id
    }
    fn secondary(&self) -> Option<(Shape, &str)> {
        Some((self.shape, &self.key))
    }
}

impl Record for Held {
    const WHAT: &'static str = "held resource";
    fn primary(&self) -> &str {
        &self.id
    }
}

impl Record for Original {
    const WHAT: &'static str = "original of";
    fn primary(&self) -> &str {
        &self.key
    }
}

/// Records in the order they were first recorded, indexed by their keys.
#[derive(Debug, Clone)]
pub struct List<T: Record> {
    items: Vec<T>,
    primary: HashMap<String, usize>,
    secondary: HashMap<Shape, HashMap<String, usize>>,
    /// How many times the list was changed since it was made or read: a record put in the
    /// place of an equal one changes nothing. An act that ends with the counts it began with
    /// changed no record (`State::opened`), and need not copy the lists to know it.
    edits: u64,
}

impl<T: Record> Default for List<T> {
    fn default() -> Self {
        List {
            items: Vec::new(),
            primary: HashMap::new(),
            secondary: HashMap::new(),
            edits: 0,
        }
    }
}

impl<T: Record> Deref for List<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.items
    }
}

impl<'a, T: Record> IntoIterator for &'a List<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl<T: Record> PartialEq for List<T> {
    fn eq(&self, other: &Self) -> bool {
        self.items == other.items
    }
}

impl<T: Record + Serialize> Serialize for List<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.items.serialize(s)
    }
}

impl<'de, T: Record + Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let items = Vec::<T>::deserialize(d)?;
        List::from_vec(items).map_err(serde::de::Error::custom)
    }
}

/// A stored list that names one key twice: not written by any version of the host.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("{what} {primary:?} is recorded twice")]
    Primary { what: &'static str, primary: String },
    #[error("{what} {shape} {key:?} is recorded twice")]
    Secondary {
        what: &'static str,
        shape: Shape,
        key: String,
    },
}

impl<T: Record> List<T> {
    /// Builds a list from stored records. Every version of the host kept each key once; a list
    /// that names one twice was not written by it, and is refused rather than guessed at.
    ///
    /// Each key is hashed once, into maps made as large as the list at the start (a store of
    /// 10,000 openings is read by every act, and the index was a fifth of reading it).
    pub fn from_vec(items: Vec<T>) -> Result<Self, ListError> {
        use std::collections::hash_map::Entry;
        let mut primary = HashMap::with_capacity(items.len());
        // How many records of each shape, for each shape's map (a handful of shapes at most).
        let mut shapes: Vec<(Shape, usize)> = Vec::new();
        for shape in items.iter().filter_map(|r| r.secondary().map(|(s, _)| s)) {
            match shapes.iter_mut().find(|(s, _)| *s == shape) {
                Some((_, n)) => *n += 1,
                None => shapes.push((shape, 1)),
            }
        }
        let mut secondary: HashMap<Shape, HashMap<String, usize>> = shapes
            .into_iter()
            .map(|(s, n)| (s, HashMap::with_capacity(n)))
            .collect();
        for (pos, rec) in items.iter().enumerate() {
            match primary.entry(rec.primary().to_string()) {
                Entry::Occupied(e) => {
                    return Err(ListError::Primary {
                        what: T::WHAT,
                        primary: e.key().clone(),
                    })
                }
                Entry::Vacant(e) => {
                    e.insert(pos);
                }
            }
            if let Some((shape, key)) = rec.secondary() {
                match secondary.entry(shape).or_default().entry(key.to_string()) {
                    Entry::Occupied(_) => {
                        return Err(ListError::Secondary {
                            what: T::WHAT,
                            shape,
                            key: key.to_string(),
                        })
                    }
                    Entry::Vacant(e) => {
                        e.insert(pos);
                    }
                }
            }
        }
        Ok(List {
            items,
            primary,
            secondary,
            edits: 0,
        })
    }

    /// How many times it was changed since it was made or read.
    pub(super) fn edits(&self) -> u64 {
        self.edits
    }

    /// The record with this primary key.
    pub fn get(&self, primary: &str) -> Option<&T> {
        self.primary.get(primary).map(|&p| &self.items[p])
    }

    /// The record with this secondary key (an owned record's shape and key).
    pub fn get_at(&self, shape: Shape, key: &str) -> Option<&T> {
        self.position_at(shape, key).map(|p| &self.items[p])
    }

    fn position_at(&self, shape: Shape, key: &str) -> Option<usize> {
        self.secondary.get(&shape)?.get(key).copied()
    }

    /// Records `rec`, replacing every record that shares its primary or its secondary key, at the
    /// place of the first of them, or at the end when there is none.
    pub(super) fn put(&mut self, rec: T) {
        let by_primary = self.primary.get(rec.primary()).copied();
        let by_secondary = rec.secondary().and_then(|(s, k)| self.position_at(s, k));
        if let Some(p) = by_primary {
            if by_secondary.is_none_or(|q| q == p) && self.items[p] == rec {
                return;
            }
        }
        self.edits += 1;
        let at = match (by_primary, by_secondary) {
            (None, None) => None,
            (Some(p), None) | (None, Some(p)) => Some(p),
            (Some(p), Some(q)) if p == q => Some(p),
            (Some(p), Some(q)) => {
                self.remove_at(p.max(q));
                Some(p.min(q))
            }
        };
        match at {
            Some(p) => {
                self.unindex(p);
                self.items[p] = rec;
                self.index(p);
            }
            None => {
                self.items.push(rec);
                self.index(self.items.len() - 1);
            }
        }
    }

    /// Removes the record with this primary key, if there is one. The records after it move up
    /// one place, so removing the last record costs nothing and removing the first costs the
    /// length of the list (removal walks the list from its end).
    pub(super) fn remove(&mut self, primary: &str) -> Option<T> {
        let pos = self.primary.get(primary).copied()?;
        self.edits += 1;
        Some(self.remove_at(pos))
    }

    fn remove_at(&mut self, pos: usize) -> T {
        self.unindex(pos);
        let rec = self.items.remove(pos);
        for p in pos..self.items.len() {
            self.index(p);
        }
        rec
    }

    fn index(&mut self, pos: usize) {
        let rec = &self.items[pos];
        self.primary.insert(rec.primary().to_string(), pos);
        if let Some((shape, key)) = rec.secondary() {
            self.secondary
                .entry(shape)
                .or_default()
                .insert(key.to_string(), pos);
        }
    }

    fn unindex(&mut self, pos: usize) {
        let rec = &self.items[pos];
        self.primary.remove(rec.primary());
        if let Some((shape, key)) = rec.secondary() {
            if let Some(m) = self.secondary.get_mut(&shape) {
                m.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(id: &str, key: &str) -> Owned {
        Owned {
            parents: Vec::new(),
            id: id.into(),
            module: None,
            shape: Shape::File,
            key: key.into(),
            digest: None,
            found: false,
            stamp: None,
        }
    }

    fn ids(l: &List<Owned>) -> Vec<(&str, &str)> {
        l.iter().map(|o| (o.id.as_str(), o.key.as_str())).collect()
    }

    /// The index answers exactly what a walk over the records would, after any change.
    fn consistent(l: &List<Owned>) {
        for (p, o) in l.iter().enumerate() {
            assert_eq!(l.primary.get(&o.id), Some(&p), "{o:?}");
            assert_eq!(l.position_at(o.shape, &o.key), Some(p), "{o:?}");
        }
        assert_eq!(l.primary.len(), l.len());
        assert_eq!(
            l.secondary.values().map(HashMap::len).sum::<usize>(),
            l.len()
        );
    }

    #[test]
    fn put_replaces_in_place_by_id_or_key_and_appends_the_new() {
        let mut l = List::default();
        l.put(owned("a", "/a"));
        l.put(owned("b", "/b"));
        l.put(owned("c", "/c"));
        l.put(owned("b", "/b2"));
        assert_eq!(ids(&l), [("a", "/a"), ("b", "/b2"), ("c", "/c")]);
        l.put(owned("c2", "/c"));
        assert_eq!(ids(&l), [("a", "/a"), ("b", "/b2"), ("c2", "/c")]);
        // One record by id, another by key: both go, the new one takes the first's place.
        l.put(owned("c2", "/a"));
        assert_eq!(ids(&l), [("c2", "/a"), ("b", "/b2")]);
        consistent(&l);
        l.put(owned("d", "/d"));
        assert_eq!(ids(&l), [("c2", "/a"), ("b", "/b2"), ("d", "/d")]);
        consistent(&l);
    }

    #[test]
    fn remove_keeps_the_order_and_the_index() {
        let mut l = List::default();
        for i in 0..6 {
            l.put(owned(&format!("r{i}"), &format!("/r{i}")));
        }
        assert_eq!(l.remove("r1").map(|o| o.id), Some("r1".into()));
        assert_eq!(l.remove("r5").map(|o| o.id), Some("r5".into()));
        assert!(l.remove("r1").is_none());
        consistent(&l);
        assert_eq!(
            ids(&l),
            [("r0", "/r0"), ("r2", "/r2"), ("r3", "/r3"), ("r4", "/r4")]
        );
        assert_eq!(l.get("r3").map(|o| o.key.as_str()), Some("/r3"));
        assert_eq!(
            l.get_at(Shape::File, "/r4").map(|o| o.id.as_str()),
            Some("r4")
        );
        assert!(l.get_at(Shape::Directory, "/r4").is_none());
    }

    #[test]
    fn a_list_naming_a_key_twice_is_refused() {
        let e = List::from_vec(vec![owned("a", "/a"), owned("a", "/b")])
            .unwrap_err()
            .to_string();
        assert_eq!(e, "owned resource \"a\" is recorded twice");
        let e = List::from_vec(vec![owned("a", "/a"), owned("b", "/a")])
            .unwrap_err()
            .to_string();
        assert_eq!(e, "owned resource file \"/a\" is recorded twice");
        let l = List::from_vec(vec![owned("a", "/a"), owned("b", "/b")]).unwrap();
        consistent(&l);
    }
}
