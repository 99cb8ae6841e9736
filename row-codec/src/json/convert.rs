//! One JSON value converted to its column's type (the coercion rules are
//! in the docs of [`super`]).

use std::borrow::Cow;
use std::fmt;

use base64::Engine as _;
use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Timelike};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

use super::Typed;
use super::skip::Skip;
use super::text::JsonText;
use crate::types::{Column, DataType};

/// Converts the next value for `column`.
pub(super) struct ValueSeed<'a> {
    pub(super) column: &'a Column,
    /// Set when the value was a floating-point zero.
    pub(super) zero: &'a std::cell::Cell<bool>,
    /// How nested values are skipped.
    pub(super) skip: Skip,
    /// Whether an object or array is its JSON text in a STRING column
    /// (else refused, as in any other column).
    pub(super) nested_as_text: bool,
}

type Converted<'de> = Result<Typed<'de>, String>;

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Converted<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

fn int_in_range<T: TryFrom<i128>>(v: i128) -> Result<T, String> {
    T::try_from(v).map_err(|_| format!("{v} is out of range"))
}

fn integer<'de>(t: DataType, v: i128) -> Converted<'de> {
    Ok(match t {
        DataType::TinyInt => Typed::TinyInt(int_in_range(v)?),
        DataType::SmallInt => Typed::SmallInt(int_in_range(v)?),
        DataType::Int => Typed::Int(int_in_range(v)?),
        DataType::BigInt => Typed::BigInt(int_in_range(v)?),
        DataType::Float => Typed::Float(v as f32),
        DataType::Double => Typed::Double(v as f64),
        DataType::String | DataType::Char(_) => Typed::Text(Cow::Owned(v.to_string())),
        DataType::Decimal(p, s) => {
            let text = v.to_string();
            check_decimal(&text, p, s)?;
            Typed::Decimal(Cow::Owned(text))
        }
        DataType::Date => Typed::Date(int_in_range(v)?),
        DataType::Time(_) => {
            let ms: i32 = int_in_range(v)?;
            if !(0..86_400_000).contains(&ms) {
                return Err(format!("{v} is not a millisecond of the day"));
            }
            Typed::Time(ms)
        }
        DataType::Timestamp(_) => Typed::Timestamp(millis_to_micros(v)?),
        DataType::TimestampLtz(_) => Typed::TimestampLtz(millis_to_micros(v)?),
        DataType::Boolean | DataType::Bytes | DataType::Binary(_) => {
            return Err(format!("found the number {v}, expected a {t}"));
        }
    })
}

fn millis_to_micros(v: i128) -> Result<i64, String> {
    int_in_range::<i64>(v)?
        .checked_mul(1000)
        .ok_or_else(|| format!("{v} ms is out of range"))
}

/// Checks decimal text and returns it trimmed; the host rescales it to the
/// column's scale when it writes.
fn check_decimal(text: &str, precision: u8, scale: u8) -> Result<&str, String> {
    let t = trim(text);
    let bytes = t.as_bytes();
    let unsigned = match bytes.first() {
        Some(b'-' | b'+') => &bytes[1..],
        _ => bytes,
    };
    // One pass: digits with at most one point, and the integer digits
    // after any leading zeros.
    let (mut int_digits, mut point, mut leading_zeros) = (0, false, true);
    for &b in unsigned {
        match b {
            b'.' if !point => point = true,
            b'0' if leading_zeros && !point => {}
            b'0'..=b'9' if !point => {
                leading_zeros = false;
                int_digits += 1;
            }
            b'0'..=b'9' => {}
            _ => return Err(format!("\"{text}\" is not a decimal number")),
        }
    }
    if unsigned.len() == usize::from(point) {
        return Err(format!("\"{text}\" is not a decimal number"));
    }
    let room = usize::from(precision.saturating_sub(scale));
    if int_digits > room || int_digits == room && rounds_up_a_digit(unsigned, scale) {
        return Err(format!("{t} does not fit DECIMAL({precision}, {scale})"));
    }
    Ok(t)
}

/// Whether rounding `unsigned` (digits with at most one point, checked) to
/// `scale` fraction digits, half away from zero, carries into one more
/// integer digit: every digit kept is a 9 and the first one dropped is 5 or
/// more (`9.996` at scale 2 is `10.00`). The host rounds the same way when it
/// writes, so a value that passes here fits its column.
fn rounds_up_a_digit(unsigned: &[u8], scale: u8) -> bool {
    let (int, fraction) = match unsigned.iter().position(|&b| b == b'.') {
        Some(point) => (&unsigned[..point], &unsigned[point + 1..]),
        None => (unsigned, &[][..]),
    };
    let scale = usize::from(scale);
    let significant = &int[int.iter().take_while(|&&b| b == b'0').count()..];
    fraction.get(scale).is_some_and(|&b| b >= b'5')
        && significant.iter().chain(&fraction[..scale]).all(|&b| b == b'9')
}

/// `s` without leading and trailing whitespace, as [`str::trim`] has it;
/// text that starts and ends with a visible ASCII character (nearly all)
/// is returned as it is without decoding a character. The host trims
/// decimal text with it too.
#[inline]
pub fn trim(s: &str) -> &str {
    match s.as_bytes() {
        [first, .., last] if first.is_ascii_graphic() && last.is_ascii_graphic() => s,
        [only] if only.is_ascii_graphic() => s,
        _ => s.trim(),
    }
}

/// Digits `s[at..at + n]` as a number, if they are all ASCII digits.
fn digits(s: &[u8], at: usize, n: usize) -> Option<u32> {
    s.get(at..at + n)?.iter().try_fold(0u32, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + (b - b'0') as u32)
    })
}

/// The common exact form `YYYY-MM-DD[T ]HH:MM:SS[.fraction][Z|±HH:MM]`,
/// read without a format interpreter; anything else goes to chrono's parsers.
pub(super) fn fast_iso_timestamp(s: &[u8]) -> Option<NaiveDateTime> {
    if s.len() < 19
        || s[4] != b'-'
        || s[7] != b'-'
        || !matches!(s[10], b'T' | b' ')
        || s[13] != b':'
        || s[16] != b':'
    {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(digits(s, 0, 4)? as i32, digits(s, 5, 2)?, digits(s, 8, 2)?)?;
    let (h, m, sec) = (digits(s, 11, 2)?, digits(s, 14, 2)?, digits(s, 17, 2)?);
    let mut at = 19;
    let mut nanos = 0u32;
    if s.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while at < s.len() && s[at].is_ascii_digit() {
            if at - start < 9 {
                nanos = nanos * 10 + (s[at] - b'0') as u32;
            }
            at += 1;
        }
        let len = at - start;
        if len == 0 {
            return None;
        }
        nanos *= 10u32.pow(9 - len.min(9) as u32);
    }
    let local = date.and_hms_nano_opt(h, m, sec, nanos)?;
    match &s[at..] {
        [] | [b'Z'] | [b'z'] => Some(local),
        [sign @ (b'+' | b'-'), rest @ ..] if rest.len() == 5 && rest[2] == b':' => {
            let offset = (digits(rest, 0, 2)? * 3600 + digits(rest, 3, 2)? * 60) as i64;
            let delta = chrono::TimeDelta::seconds(if *sign == b'+' { -offset } else { offset });
            local.checked_add_signed(delta)
        }
        _ => None,
    }
}

fn parse_timestamp(s: &str) -> Option<NaiveDateTime> {
    let s = trim(s);
    if let Some(fast) = fast_iso_timestamp(s.as_bytes()) {
        return Some(fast);
    }
    if let Ok(dt) = DateTime::parse_from_rfc3339(s) {
        return Some(dt.naive_utc());
    }
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
        .or_else(|| {
            NaiveDate::parse_from_str(s, "%Y-%m-%d")
                .ok()?
                .and_hms_opt(0, 0, 0)
        })
}

fn text<'de>(t: DataType, s: Cow<'de, str>) -> Converted<'de> {
    let what = || format!("\"{s}\" is not a {t}");
    Ok(match t {
        DataType::String | DataType::Char(_) => Typed::Text(s),
        DataType::Boolean => match trim(&s) {
            "true" => Typed::Boolean(true),
            "false" => Typed::Boolean(false),
            _ => return Err(what()),
        },
        DataType::TinyInt | DataType::SmallInt | DataType::Int | DataType::BigInt => {
            let v: i128 = trim(&s).parse().map_err(|_| what())?;
            return integer(t, v);
        }
        DataType::Float => Typed::Float(trim(&s).parse().map_err(|_| what())?),
        DataType::Double => Typed::Double(trim(&s).parse().map_err(|_| what())?),
        DataType::Decimal(p, sc) => {
            check_decimal(&s, p, sc)?;
            Typed::Decimal(match s {
                Cow::Borrowed(b) => Cow::Borrowed(trim(b)),
                Cow::Owned(o) => Cow::Owned(trim(&o).to_string()),
            })
        }
        DataType::Bytes | DataType::Binary(_) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(trim(&s))
                .map_err(|e| format!("\"{s}\" is not standard base64: {e}"))?;
            if let DataType::Binary(n) = t
                && bytes.len() != n as usize
            {
                return Err(format!(
                    "{} bytes given, BINARY({n}) needs exactly {n}",
                    bytes.len()
                ));
            }
            Typed::Bytes(bytes)
        }
        DataType::Date => {
            let t = trim(&s).as_bytes();
            let fast = (t.len() == 10 && t[4] == b'-' && t[7] == b'-')
                .then(|| NaiveDate::from_ymd_opt(digits(t, 0, 4)? as i32, digits(t, 5, 2)?, digits(t, 8, 2)?))
                .flatten();
            let d = match fast {
                Some(d) => d,
                None => NaiveDate::parse_from_str(trim(&s), "%Y-%m-%d").map_err(|_| what())?,
            };
            Typed::Date((d - NaiveDate::from_ymd_opt(1970, 1, 1).expect("epoch")).num_days() as i32)
        }
        DataType::Time(_) => {
            let tm = NaiveTime::parse_from_str(trim(&s), "%H:%M:%S%.f")
                .or_else(|_| NaiveTime::parse_from_str(trim(&s), "%H:%M"))
                .map_err(|_| what())?;
            Typed::Time((tm.num_seconds_from_midnight() * 1000 + tm.nanosecond() / 1_000_000) as i32)
        }
        DataType::Timestamp(_) => {
            Typed::Timestamp(parse_timestamp(&s).ok_or_else(what)?.and_utc().timestamp_micros())
        }
        DataType::TimestampLtz(_) => {
            Typed::TimestampLtz(parse_timestamp(&s).ok_or_else(what)?.and_utc().timestamp_micros())
        }
    })
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Converted<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a value for column `{}`", self.column.name)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Ok(Typed::Null))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(match self.column.data_type {
            DataType::Boolean => Ok(Typed::Boolean(v)),
            DataType::String | DataType::Char(_) => {
                Ok(Typed::Text(Cow::Borrowed(if v { "true" } else { "false" })))
            }
            t => Err(format!("found the boolean {v}, expected a {t}")),
        })
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(integer(self.column.data_type, v as i128))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(integer(self.column.data_type, v as i128))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        if v == 0.0 {
            self.zero.set(true);
        }
        let t = self.column.data_type;
        Ok(match t {
            DataType::Float => Ok(Typed::Float(v as f32)),
            DataType::Double => Ok(Typed::Double(v)),
            DataType::String | DataType::Char(_) => Ok(Typed::Text(Cow::Owned(v.to_string()))),
            DataType::Decimal(p, s) => {
                let text = v.to_string();
                match check_decimal(&text, p, s) {
                    Ok(_) => Ok(Typed::Decimal(Cow::Owned(text))),
                    Err(e) => Err(e),
                }
            }
            _ if v.fract() == 0.0 && v.abs() < 9.0e18 => integer(t, v as i128),
            _ => Err(format!("found the number {v}, expected a {t}")),
        })
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(text(self.column.data_type, Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(text(self.column.data_type, Cow::Owned(v.to_string())))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        if self.nested_as_text && self.column.data_type == DataType::String {
            let mut text = String::new();
            JsonText::new(&mut text, self.skip.limit()).visit_map(map)?;
            return Ok(Ok(Typed::Text(Cow::Owned(text))));
        }
        while map.next_key_seed(self.skip)?.is_some() {
            map.next_value_seed(self.skip)?;
        }
        Ok(Err(format!(
            "found an object, expected a {}",
            self.column.data_type
        )))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        if self.nested_as_text && self.column.data_type == DataType::String {
            let mut text = String::new();
            JsonText::new(&mut text, self.skip.limit()).visit_seq(seq)?;
            return Ok(Ok(Typed::Text(Cow::Owned(text))));
        }
        while seq.next_element_seed(self.skip)?.is_some() {}
        Ok(Err(format!(
            "found an array, expected a {}",
            self.column.data_type
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::{check_decimal, trim};

    #[test]
    fn decimals_are_digits_with_one_point_and_room_for_their_integer_part() {
        let not_a_number = |t: &str| Err(format!("\"{t}\" is not a decimal number"));
        for (text, checked) in [
            ("12.30", Ok("12.30")),
            (" -12.3 ", Ok("-12.3")),
            ("+7", Ok("+7")),
            ("5.", Ok("5.")),
            (".5", Ok(".5")),
            ("-.5", Ok("-.5")),
            ("0000123.45", Ok("0000123.45")),
            ("0.000", Ok("0.000")),
            ("", not_a_number("")),
            ("-", not_a_number("-")),
            (".", not_a_number(".")),
            ("+.", not_a_number("+.")),
            ("1.2.3", not_a_number("1.2.3")),
            ("--1", not_a_number("--1")),
            ("1e5", not_a_number("1e5")),
            ("1 2", not_a_number("1 2")),
            ("\u{663}", not_a_number("\u{663}")),
            ("1234.5", Err("1234.5 does not fit DECIMAL(5, 2)".into())),
            ("-00100.000", Err("-00100.000 does not fit DECIMAL(4, 2)".into())),
        ] {
            let precision = if text.contains("100.") { 4 } else { 5 };
            assert_eq!(check_decimal(text, precision, 2), checked, "{text:?}");
        }
    }

    #[test]
    fn decimals_that_round_past_their_precision_do_not_fit() {
        for (text, precision, scale, fits) in [
            ("99.994", 4, 2, true),
            ("99.995", 4, 2, false),
            ("-99.996", 4, 2, false),
            ("0099.999", 4, 2, false),
            ("98.999", 4, 2, true),
            ("99.99", 4, 2, true),
            ("9.995", 4, 2, true),
            ("0.995", 2, 2, false),
            (".994", 2, 2, true),
            ("999.5", 3, 0, false),
            ("999.4", 3, 0, true),
            ("99", 2, 0, true),
        ] {
            let checked = check_decimal(text, precision, scale);
            assert_eq!(
                checked.is_ok(),
                fits,
                "{text:?} at DECIMAL({precision}, {scale}): {checked:?}"
            );
            // The host's conversion agrees: what passes here fits the column.
            let host_fits = reference_fits(text, precision, scale);
            assert_eq!(host_fits, fits, "{text:?}: the reference disagrees");
        }
    }

    /// Whether `text` rounded half away from zero to `scale` fits
    /// DECIMAL(`precision`, `scale`), in 128-bit arithmetic.
    fn reference_fits(text: &str, precision: u8, scale: u8) -> bool {
        let unsigned = text.trim_start_matches(['-', '+']);
        let (int, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        let mut digits: String = int.to_string();
        let scale = usize::from(scale);
        let kept: String = fraction
            .chars()
            .chain(std::iter::repeat('0'))
            .take(scale)
            .collect();
        digits.push_str(&kept);
        let mut value: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().unwrap()
        };
        if fraction.as_bytes().get(scale).is_some_and(|&b| b >= b'5') {
            value += 1;
        }
        value < 10i128.pow(u32::from(precision))
    }

    #[test]
    fn trim_is_str_trim() {
        for text in [
            "",
            " ",
            "a",
            " a",
            "a ",
            "12.5",
            "\t12.5\n",
            "\u{a0}1\u{a0}",
            "\u{3000}x",
            "x\u{85}",
            "é",
            " é ",
            "a b",
            "\u{2028}",
            "-",
            "\u{7f}a\u{7f}",
        ] {
            assert_eq!(trim(text), text.trim(), "{text:?}");
        }
    }
}
