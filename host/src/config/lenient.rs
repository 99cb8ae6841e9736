//! Readers for option values as the runtime hands them over: a number or a
//! boolean where a string belongs (its environment overrides turn numeric
//! strings into numbers), humantime durations, byte sizes, secrets.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::{self, Deserializer};

/// A string, or a number or boolean written where a string belongs.
#[derive(Deserialize)]
#[serde(untagged)]
enum StringLike {
    Text(String),
    Integer(i64),
    Unsigned(u64),
    Float(f64),
    Bool(bool),
}

impl From<StringLike> for String {
    fn from(v: StringLike) -> Self {
        match v {
            StringLike::Text(s) => s,
            StringLike::Integer(n) => n.to_string(),
            StringLike::Unsigned(n) => n.to_string(),
            StringLike::Float(n) => n.to_string(),
            StringLike::Bool(b) => b.to_string(),
        }
    }
}

/// A value never shown: `Debug` prints `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

pub(super) fn opt_secret<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Secret>, D::Error> {
    Ok(opt_lenient_string(d)?.map(Secret))
}

pub(super) fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    StringLike::deserialize(d)
        .map(String::from)
        .map_err(|_| de::Error::custom("expected a string"))
}

pub(super) fn opt_lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<StringLike>::deserialize(d)
        .map_err(|_| de::Error::custom("expected a string"))?
        .map(String::from))
}

pub(super) fn lenient_string_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    let map = BTreeMap::<String, StringLike>::deserialize(d)
        .map_err(|_| de::Error::custom("expected a table of strings"))?;
    Ok(map.into_iter().map(|(k, v)| (k, v.into())).collect())
}

/// `batch_size`: a whole number, written as a number or as text, or
/// `"auto"` (any case) for `None`. serde names no field in a custom
/// error, so the messages name the option.
pub(super) fn opt_batch_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    let expected = "batch_size: expected a whole number or \"auto\"";
    match StringLike::deserialize(d).map_err(|_| de::Error::custom(expected))? {
        StringLike::Unsigned(n) => usize::try_from(n)
            .map(Some)
            .map_err(|_| de::Error::custom(format!("batch_size: {n} is too large"))),
        StringLike::Integer(n) => usize::try_from(n)
            .map(Some)
            .map_err(|_| de::Error::custom(format!("{expected}, got {n}"))),
        StringLike::Text(s) if s.trim().eq_ignore_ascii_case("auto") => Ok(None),
        StringLike::Text(s) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| de::Error::custom(format!("{expected}, got \"{s}\""))),
        StringLike::Float(n) => Err(de::Error::custom(format!("{expected}, got {n}"))),
        StringLike::Bool(b) => Err(de::Error::custom(format!("{expected}, got {b}"))),
    }
}

pub(super) fn opt_lenient_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let Some(v) =
        Option::<StringLike>::deserialize(d).map_err(|_| de::Error::custom("expected a whole number"))?
    else {
        return Ok(None);
    };
    let text = String::from(v);
    text.trim()
        .parse()
        .map(Some)
        .map_err(|_| de::Error::custom(format!("expected a whole number, got \"{text}\"")))
}

pub(super) fn opt_byte_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let Some(v) = Option::<StringLike>::deserialize(d)
        .map_err(|_| de::Error::custom("expected a size such as \"256 MiB\""))?
    else {
        return Ok(None);
    };
    match v {
        StringLike::Unsigned(n) => Ok(Some(n)),
        StringLike::Integer(n) if n >= 0 => Ok(Some(n as u64)),
        StringLike::Text(s) => s
            .parse::<bytesize::ByteSize>()
            .map(|b| Some(b.as_u64()))
            .map_err(|e| de::Error::custom(format!("size \"{s}\": {e}"))),
        _ => Err(de::Error::custom("expected a size such as \"256 MiB\"")),
    }
}

/// Durations as humantime strings.
pub(super) mod duration {
    use std::time::Duration;

    use serde::{Deserializer, Serializer, de};

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = super::lenient_string(d)?;
        humantime::parse_duration(&text).map_err(|e| {
            de::Error::custom(format!(
                "duration \"{text}\": {e} (write it with a unit, like \"500ms\" or \"5s\")"
            ))
        })
    }

    pub(crate) fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*value).to_string())
    }
}

/// Optional humantime durations.
pub(super) mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct Wrapped(#[serde(with = "super::duration")] Duration);
        Ok(Option::<Wrapped>::deserialize(d)?.map(|w| w.0))
    }

    pub(crate) fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => super::duration::serialize(v, s),
            None => s.serialize_none(),
        }
    }
}
