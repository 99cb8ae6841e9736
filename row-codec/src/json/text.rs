//! An object or array written out as JSON text, for a STRING column: keys
//! in the payload's order, numbers and strings as serde_json writes them,
//! followed as deep as [`super::skip::Skip`] follows (serde_json limits
//! the depth itself; sonic-rs does not).

use std::fmt::{self, Write as _};

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Writes one JSON value's text to `out`.
pub(super) struct JsonText<'a> {
    out: &'a mut String,
    depth: usize,
    limit: usize,
}

impl<'a> JsonText<'a> {
    /// A writer of a column's value, following nested values at most
    /// `limit` deep.
    pub(super) fn new(out: &'a mut String, limit: usize) -> Self {
        Self { out, depth: 1, limit }
    }

    fn deeper<E: de::Error>(&mut self) -> Result<JsonText<'_>, E> {
        if self.depth >= self.limit {
            return Err(E::custom("nested too deeply"));
        }
        Ok(JsonText {
            out: self.out,
            depth: self.depth + 1,
            limit: self.limit,
        })
    }

    fn quoted(&mut self, text: &str) {
        self.out
            .push_str(&serde_json::to_string(text).expect("a string serialises"));
    }
}

impl<'de> DeserializeSeed<'de> for JsonText<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JsonText<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.out.push_str(if v { "true" } else { "false" });
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        write!(self.out, "{v}").expect("a String takes text");
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        write!(self.out, "{v}").expect("a String takes text");
        Ok(())
    }
    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        self.out
            .push_str(&serde_json::to_string(&v).expect("a finite number serialises"));
        Ok(())
    }
    fn visit_str<E>(mut self, v: &str) -> Result<(), E> {
        self.quoted(v);
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.out.push_str("null");
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.out.push('[');
        let mut first = true;
        loop {
            let mark = self.out.len();
            if !first {
                self.out.push(',');
            }
            if seq.next_element_seed(self.deeper()?)?.is_none() {
                self.out.truncate(mark);
                break;
            }
            first = false;
        }
        self.out.push(']');
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.out.push('{');
        let mut first = true;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if !first {
                self.out.push(',');
            }
            first = false;
            self.quoted(&key);
            self.out.push(':');
            map.next_value_seed(self.deeper()?)?;
        }
        self.out.push('}');
        Ok(())
    }
}
