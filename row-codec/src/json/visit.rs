//! The parsers' side of the mapping: serde visitors that match an object's
//! keys to columns as the parser meets them and convert each value in place.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

use super::convert::ValueSeed;
use super::skip::{Skip, SkipNonNull};
use super::{JsonMapper, MapError, Typed, UnknownFields};

/// Reads one JSON object with `de` into `visitor`, then the end of the input.
pub(super) fn serde_json_object<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
    visitor: ObjectVisitor<'_, 'de>,
) -> Result<(), MapError> {
    match de.deserialize_map(visitor).and_then(|()| de.end()) {
        Ok(()) => Ok(()),
        Err(e) if e.is_data() => Err(MapError::NotAnObject),
        Err(e) => Err(MapError::InvalidJson(e.to_string())),
    }
}

/// Reads an object's fields into their columns' slots (see [`JsonMapper::parse`]).
pub(super) struct ObjectVisitor<'a, 'de> {
    pub(super) mapper: &'a JsonMapper,
    pub(super) slots: &'a mut [Option<Typed<'de>>],
    pub(super) failure: &'a mut Option<MapError>,
    /// Set when a mapped value was a floating-point zero (see `parse_with`).
    pub(super) zero: &'a std::cell::Cell<bool>,
    /// How fields without a column are skipped.
    pub(super) skip: Skip,
}

impl<'de> Visitor<'de> for ObjectVisitor<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut hint = 0;
        let mut unknown_key = None;
        while let Some(found) = map.next_key_seed(KeySeed {
            mapper: self.mapper,
            hint,
            unknown_key: &mut unknown_key,
        })? {
            match found {
                Some(index) => {
                    let column = &self.mapper.columns[index];
                    match map.next_value_seed(ValueSeed {
                        column,
                        zero: self.zero,
                        skip: self.skip,
                        // The field a route is read from is text as
                        // `JsonField` reads it: never an object.
                        nested_as_text: self.mapper.nested_as_text && self.mapper.field != Some(index),
                    }) {
                        Ok(Ok(value)) => self.slots[index] = Some(value),
                        Ok(Err(reason)) => {
                            *self.failure = Some(MapError::Convert {
                                column: column.name.clone(),
                                data_type: column.data_type,
                                reason,
                            });
                            return Err(de::Error::custom("conversion failed"));
                        }
                        Err(e) => return Err(e),
                    }
                    hint = index + 1;
                }
                None if self.mapper.unknown == UnknownFields::Refuse => {
                    // Read again for its name: only in this mode, and only
                    // for a field the table lacks.
                    // Skipped with the depth limit: sonic-rs's own skipping
                    // recurses without one.
                    if map.next_value_seed(SkipNonNull(self.skip))? {
                        *self.failure = Some(MapError::UnknownField(unknown_key.take().unwrap_or_default()));
                        return Err(de::Error::custom("field without a column"));
                    }
                }
                None => {
                    if self.mapper.unknown == UnknownFields::Note {
                        self.mapper.note_unknown_field();
                    }
                    map.next_value_seed(self.skip)?;
                }
            }
        }
        Ok(())
    }
}

struct KeySeed<'a> {
    mapper: &'a JsonMapper,
    hint: usize,
    /// Set to a key without a column when the mapper refuses those.
    unknown_key: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        let found = self.mapper.find(key, self.hint);
        if found.is_none() && self.mapper.unknown == UnknownFields::Refuse {
            *self.unknown_key = Some(key.to_string());
        }
        Ok(found)
    }
}
