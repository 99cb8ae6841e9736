//! The top-level fields of a JSON object with the type of column each
//! value would need: what a sink that adds columns for new fields
//! (`evolve_schema`) asks of the messages that brought them.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

use super::MapError;
use crate::types::DataType;

/// The column type each top-level field of `payload` (a JSON object) would
/// need, in the payload's order, for fields whose value is not `null`: an
/// integer needs a `BIGINT` (one past its range a `DOUBLE`), any other
/// number a `DOUBLE`, a boolean a `BOOLEAN`, a string a `STRING`, and an
/// object or array a `STRING` (written as its JSON text). A field given
/// more than once gets one type that takes all its values: `DOUBLE` for
/// integers and other numbers, `STRING` for any other mix.
pub fn field_types(payload: &[u8]) -> Result<Vec<(String, DataType)>, MapError> {
    let mut de = serde_json::Deserializer::from_slice(payload);
    let fields = de
        .deserialize_map(Fields)
        .and_then(|fields| de.end().map(|()| fields));
    match fields {
        Ok(fields) => {
            let mut merged: Vec<(String, DataType)> = Vec::with_capacity(fields.len());
            for (name, data_type) in fields {
                match merged.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, known)) => *known = taking_both(*known, data_type),
                    None => merged.push((name, data_type)),
                }
            }
            Ok(merged)
        }
        Err(e) if e.is_data() => Err(MapError::NotAnObject),
        Err(e) => Err(MapError::InvalidJson(e.to_string())),
    }
}

/// A column type that takes the values of both types (of [`ValueType`]'s).
fn taking_both(a: DataType, b: DataType) -> DataType {
    match (a, b) {
        _ if a == b => a,
        (DataType::BigInt | DataType::Double, DataType::BigInt | DataType::Double) => DataType::Double,
        _ => DataType::String,
    }
}

struct Fields;

impl<'de> Visitor<'de> for Fields {
    type Value = Vec<(String, DataType)>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            if let Some(data_type) = map.next_value_seed(ValueType)? {
                fields.push((name, data_type));
            }
        }
        Ok(fields)
    }
}

/// The column type a value needs (`None` for `null`).
struct ValueType;

impl<'de> DeserializeSeed<'de> for ValueType {
    type Value = Option<DataType>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueType {
    type Value = Option<DataType>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Some(DataType::Boolean))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Some(DataType::BigInt))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(if i64::try_from(v).is_ok() {
            DataType::BigInt
        } else {
            DataType::Double
        }))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Some(DataType::Double))
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Some(DataType::String))
    }
    // Nested values are read through, not skipped: serde_json skips a
    // string without checking its escapes, which the mapping, writing the
    // value out as text, refuses (found by fuzzing: a column was made for
    // a payload then refused as invalid JSON).
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element_seed(ValueType)?.is_some() {}
        Ok(Some(DataType::String))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_key_seed(ValueType)?.is_some() {
            map.next_value_seed(ValueType)?;
        }
        Ok(Some(DataType::String))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_gives_its_column_type_in_the_payloads_order() {
        let fields = field_types(
            br#"{"i":-3,"big":18446744073709551615,"f":1.5,"e":1e3,"b":false,"s":"x",
                "o":{"a":[1]},"a":[],"n":null,"i":"again","m":1,"m":2.5,"k":7,"k":null}"#,
        )
        .unwrap();
        let names: Vec<(&str, DataType)> = fields.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        assert_eq!(
            names,
            vec![
                ("i", DataType::String),
                ("big", DataType::Double),
                ("f", DataType::Double),
                ("e", DataType::Double),
                ("b", DataType::Boolean),
                ("s", DataType::String),
                ("o", DataType::String),
                ("a", DataType::String),
                ("m", DataType::Double),
                ("k", DataType::BigInt),
            ]
        );
    }

    #[test]
    fn a_nested_string_that_is_not_utf8_is_refused_as_the_mapping_refuses_it() {
        // A byte that is not UTF-8 in a nested key: found by fuzzing.
        let refused = field_types(b"{\"o\":{\"k\":[1,{\"\xff\":null}]}}");
        assert!(
            matches!(&refused, Err(MapError::InvalidJson(e)) if e.contains("unicode code point")),
            "{refused:?}"
        );
    }

    #[test]
    fn what_is_not_an_object_is_refused_as_the_mapping_refuses_it() {
        assert_eq!(field_types(b"[1]"), Err(MapError::NotAnObject));
        assert!(matches!(field_types(b"{\"a\":"), Err(MapError::InvalidJson(_))));
    }
}
