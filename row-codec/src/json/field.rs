//! One top-level field of JSON objects read as text (a routing field).

use super::{JsonMapper, MapError, Typed};
use crate::types::{Column, DataType};

/// The text of one top-level field of a JSON object: a string as it is,
/// a number or boolean as its JSON text, `None` when missing or null. For
/// the same field in many payloads, make a [`JsonField`] once.
pub fn field_text(payload: &[u8], field: &str) -> Result<Option<String>, MapError> {
    JsonField::new(field).text(payload)
}

/// A reader of one top-level field of JSON objects, made once for many
/// payloads (see [`field_text`]).
#[derive(Debug, Clone)]
pub struct JsonField {
    mapper: JsonMapper,
}

impl JsonField {
    /// A reader of field `name`.
    pub fn new(name: &str) -> Self {
        Self {
            mapper: JsonMapper::new(vec![Column::new(name, DataType::String, true)]),
        }
    }

    /// The field's text in `payload`, as [`field_text`] reads it.
    pub fn text(&self, payload: &[u8]) -> Result<Option<String>, MapError> {
        let mut slot = [None];
        self.mapper.parse(payload, &mut slot)?;
        let [slot] = slot;
        Ok(match slot {
            Some(Typed::Text(text)) => Some(text.into_owned()),
            _ => None,
        })
    }
}
