//! Skipping the JSON values no column takes, with a depth limit.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

use super::JsonParser;

/// How deep [`Skip`] follows nested arrays and objects under sonic-rs
/// before it gives up (below serde_json's own limit of 128, so that
/// serde_json, which reads such a payload again, decides there).
#[cfg(not(target_arch = "wasm32"))]
const MAX_SKIP_DEPTH: usize = 100;

/// Skips one JSON value. Nested values go through `deserialize_any` with a
/// depth limit, instead of the parser's own skipping: sonic-rs 0.5 skips
/// nested containers by recursion without a limit, so a deeply nested
/// field would overflow the stack. (serde_json limits the depth itself.)
#[derive(Clone, Copy)]
pub(super) struct Skip {
    depth: usize,
    limit: usize,
}

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
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
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let inner = self.deeper()?;
        while seq.next_element_seed(inner)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let inner = self.deeper()?;
        while map.next_key_seed(inner)?.is_some() {
            map.next_value_seed(inner)?;
        }
        Ok(())
    }
}

/// Skips one JSON value as [`Skip`] does (with its depth limit); whether
/// it was anything but `null`.
#[derive(Clone, Copy)]
pub(super) struct SkipNonNull(pub(super) Skip);

impl<'de> DeserializeSeed<'de> for SkipNonNull {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for SkipNonNull {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_none<E>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        self.0.deserialize(d).map(|()| true)
    }
}

impl Skip {
    pub(super) fn for_parser(parser: JsonParser) -> Self {
        let limit = match parser {
            JsonParser::SerdeJson => usize::MAX,
            #[cfg(not(target_arch = "wasm32"))]
            JsonParser::Sonic => MAX_SKIP_DEPTH,
        };
        Self { depth: 1, limit }
    }

    /// How deep nested values are followed.
    pub(super) fn limit(self) -> usize {
        self.limit
    }

    fn deeper<E: de::Error>(self) -> Result<Self, E> {
        if self.depth >= self.limit {
            return Err(E::custom("nested too deeply"));
        }
        Ok(Self {
            depth: self.depth + 1,
            ..self
        })
    }
}
