//! A first, quick reading of the common payload: one JSON object whose
//! strings have no escapes and whose numbers fit in 18 digits, read without
//! serde's visitor machinery. It converts each mapped value with the same
//! code the parsers' visitors call ([`ValueSeed`]), so a row it makes is the
//! row they make.
//!
//! It never refuses anything: whatever it is not sure of (an escape, a
//! control character, a long or negative-zero integer, a float out of range,
//! an object or array in a mapped column, nesting deeper than
//! [`MAX_DEPTH`], a value that does not convert, anything that is not valid
//! JSON) makes it give up, and the caller reads the payload again with its
//! parser, whose refusals and texts stay the only ones.

use std::cell::Cell;

use serde::de::Visitor;
use serde::de::value::Error as Unused;

use super::convert::ValueSeed;
use super::skip::Skip;
use super::{JsonMapper, JsonParser, Typed, UnknownFields};
use crate::types::{Column, DataType};
use std::borrow::Cow;

/// Nesting in an unmapped field deeper than this is left to the parser.
const MAX_DEPTH: usize = 64;

/// Reads `text` into `slots` (one per column of `mapper`). `true` when it
/// read the whole payload and converted every mapped value; on `false`
/// the slots hold whatever was read so far and the caller must clear them.
pub(super) fn read_flat_object<'de>(
    mapper: &JsonMapper,
    text: &'de str,
    slots: &mut [Option<Typed<'de>>],
) -> bool {
    let mut reader = Reader { text, at: 0 };
    reader.object(mapper, slots).is_some()
}

/// A cursor over the payload. Each method returns `None` to give up.
struct Reader<'de> {
    text: &'de str,
    at: usize,
}

/// A JSON number as serde_json hands it to a visitor.
enum Number {
    Unsigned(u64),
    Negative(i64),
    Float(f64),
}

impl<'de> Reader<'de> {
    fn bytes(&self) -> &'de [u8] {
        self.text.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    fn whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes().get(self.at..end)? == word.as_bytes()).then(|| self.at = end)
    }

    fn object(&mut self, mapper: &JsonMapper, slots: &mut [Option<Typed<'de>>]) -> Option<()> {
        self.whitespace();
        self.expect(b'{')?;
        self.whitespace();
        if self.peek()? == b'}' {
            self.at += 1;
        } else {
            let mut hint = 0;
            loop {
                let key = self.string()?;
                self.whitespace();
                self.expect(b':')?;
                self.whitespace();
                match mapper.find(key, hint) {
                    Some(index) => {
                        self.map_value(mapper, index, &mut slots[index])?;
                        hint = index + 1;
                    }
                    // Whether a field without a column refuses the payload
                    // depends on its value: the parser decides.
                    None if mapper.unknown == UnknownFields::Refuse => return None,
                    None => {
                        if mapper.unknown == UnknownFields::Note {
                            mapper.note_unknown_field();
                        }
                        self.skip_value(1)?
                    }
                }
                self.whitespace();
                match self.peek()? {
                    b',' => {
                        self.at += 1;
                        self.whitespace();
                    }
                    b'}' => {
                        self.at += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.whitespace();
        (self.at == self.text.len()).then_some(())
    }

    /// A string without escapes or control characters, the cursor on its
    /// opening quote. Inlined: a row has a dozen strings, keys included, and
    /// a call cost a fifth of a short one.
    #[inline(always)]
    fn string(&mut self) -> Option<&'de str> {
        self.expect(b'"')?;
        let start = self.at;
        let rest = &self.bytes()[start..];
        let len = string_end(rest)?;
        if rest[len] != b'"' {
            return None;
        }
        self.at = start + len + 1;
        // SAFETY: `start` is just past the opening quote and `start + len`
        // is the closing quote's index, both within `text`.
        Some(unsafe { self.ascii_bounded(start, start + len) })
    }

    /// `text[start..end]` without the char-boundary checks of slicing,
    /// which cost ~25 instructions a slice in a guest, where they are not
    /// inlined (and ~6 % of a row natively).
    ///
    /// # Safety
    ///
    /// `start <= end <= text.len()`, and `start` and `end` each sit next to
    /// an ASCII byte of `text` (the byte before it or the byte at it):
    /// neither can then be inside a multi-byte character.
    #[inline(always)]
    unsafe fn ascii_bounded(&self, start: usize, end: usize) -> &'de str {
        debug_assert!(start <= end && self.text.is_char_boundary(start) && self.text.is_char_boundary(end));
        // SAFETY: the caller's promise makes both ends char boundaries
        // within `text`.
        unsafe { self.text.get_unchecked(start..end) }
    }

    /// A number in JSON's grammar, converted as serde_json converts it.
    fn number(&mut self) -> Option<Number> {
        let start = self.at;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let digits_start = self.at;
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        let digits = self.at - digits_start;
        let mut float = false;
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.some_digits()?;
            float = true;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.some_digits()?;
            float = true;
        }
        // SAFETY: a number's bytes are ASCII: `start` is at its first and
        // `self.at` just past its last, within `text`.
        let text = unsafe { self.ascii_bounded(start, self.at) };
        if float {
            // Correctly rounded, as serde_json's `float_roundtrip`; a number
            // past f64's range is serde_json's to refuse.
            return text
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .map(Number::Float);
        }
        if digits > 18 {
            return None;
        }
        // SAFETY: as above, from the first digit to the end of the number.
        let value: u64 = unsafe { self.ascii_bounded(digits_start, self.at) }
            .parse()
            .ok()?;
        match (negative, value) {
            (false, v) => Some(Number::Unsigned(v)),
            // serde_json reads `-0` as the float -0.0.
            (true, 0) => None,
            (true, v) => Some(Number::Negative(-(v as i64))),
        }
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }

    /// Puts the value of column `index`, converted, in `slot`; `None` when
    /// it is not one this reader takes or does not convert.
    ///
    /// The commonest values, a string into a text column and an integer into
    /// a BIGINT one, are converted here as `ValueSeed` converts them and
    /// written into the slot in place. Returned, a value was put together
    /// on the stack and copied into its slot with wide loads that stalled
    /// on the narrower stores that made it (perf: a fifth of the lean path).
    #[inline(always)]
    fn map_value(&mut self, mapper: &JsonMapper, index: usize, slot: &mut Option<Typed<'de>>) -> Option<()> {
        let column = &mapper.columns[index];
        match (self.peek()?, column.data_type) {
            (b'"', DataType::String | DataType::Char(_)) => {
                *slot = Some(Typed::Text(Cow::Borrowed(self.string()?)));
                return Some(());
            }
            (b'-' | b'0'..=b'9', DataType::BigInt) => {
                let start = self.at;
                match self.number()? {
                    // Past i64 (longer integers the reader leaves to the parser
                    // already), ValueSeed refuses it: the parser words that.
                    Number::Unsigned(v) => {
                        *slot = Some(Typed::BigInt(i64::try_from(v).ok()?));
                        return Some(());
                    }
                    Number::Negative(v) => {
                        *slot = Some(Typed::BigInt(v));
                        return Some(());
                    }
                    Number::Float(_) => self.at = start,
                }
            }
            _ => {}
        }
        *slot = Some(self.converted_value(column)?);
        Some(())
    }

    /// The value of `column`, converted by `ValueSeed`; `None` when it is
    /// not one this reader takes or does not convert.
    fn converted_value(&mut self, column: &Column) -> Option<Typed<'de>> {
        let zero = Cell::new(false);
        let seed = ValueSeed {
            column,
            zero: &zero,
            skip: Skip::for_parser(JsonParser::SerdeJson),
            // Never met here: a nested value is left to the parser.
            nested_as_text: false,
        };
        let converted = match self.peek()? {
            b'"' => {
                let text = self.string()?;
                seed.visit_borrowed_str::<Unused>(text)
            }
            b't' => {
                self.literal("true")?;
                seed.visit_bool::<Unused>(true)
            }
            b'f' => {
                self.literal("false")?;
                seed.visit_bool::<Unused>(false)
            }
            b'n' => {
                self.literal("null")?;
                seed.visit_unit::<Unused>()
            }
            b'-' | b'0'..=b'9' => match self.number()? {
                Number::Unsigned(v) => seed.visit_u64::<Unused>(v),
                Number::Negative(v) => seed.visit_i64::<Unused>(v),
                Number::Float(v) => seed.visit_f64::<Unused>(v),
            },
            _ => return None,
        };
        converted.ok()?.ok()
    }

    /// Skips one value of any kind, checking its grammar.
    fn skip_value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => self.number().map(drop),
            open @ (b'{' | b'[') => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                let close = if open == b'{' { b'}' } else { b']' };
                self.at += 1;
                self.whitespace();
                if self.peek()? == close {
                    self.at += 1;
                    return Some(());
                }
                loop {
                    if open == b'{' {
                        self.string()?;
                        self.whitespace();
                        self.expect(b':')?;
                        self.whitespace();
                    }
                    self.skip_value(depth + 1)?;
                    self.whitespace();
                    match self.peek()? {
                        b',' => {
                            self.at += 1;
                            self.whitespace();
                        }
                        b if b == close => {
                            self.at += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            _ => None,
        }
    }
}

/// How many bytes of a string [`string_end`] scans a word at a time before
/// it hands the rest to [`rest_end`] (whose call costs more than a short
/// string).
const SHORT_STRING: usize = 64;

/// Where the first quote, backslash or control character of `bytes` is:
/// the first [`SHORT_STRING`] bytes eight at a time, the rest by
/// [`rest_end`].
///
/// Most strings (keys, short values) end within their first eight bytes:
/// that word is looked at here, inlined, and the rest of the search is a
/// call.
#[inline(always)]
fn string_end(bytes: &[u8]) -> Option<usize> {
    if let Some(word) = bytes.first_chunk::<8>() {
        let found = specials(u64::from_le_bytes(*word));
        if found != 0 {
            return Some(found.trailing_zeros() as usize / 8);
        }
    }
    string_end_past_first_word(bytes)
}

/// Whether `byte` ends a string's plain run: a quote, a backslash or a
/// control character.
#[inline(always)]
fn special(byte: u8) -> bool {
    (byte == b'"') | (byte == b'\\') | (byte < 0x20)
}

/// The high bit of each byte of `word` that is a quote, a backslash or a
/// control character, exact up to the first such byte (a borrow may mark
/// bytes past it, never before it).
#[inline(always)]
fn specials(word: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let zeros = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    zeros(word ^ (ONES * u64::from(b'"')))
        | zeros(word ^ (ONES * u64::from(b'\\')))
        | (word.wrapping_sub(ONES * 0x20) & !word & HIGHS)
}

/// [`string_end`] after its first word (whose bytes it checks again when
/// `bytes` is shorter than a word).
#[inline(never)]
fn string_end_past_first_word(bytes: &[u8]) -> Option<usize> {
    let head = &bytes[..bytes.len().min(SHORT_STRING)];
    let mut words = head.chunks_exact(8);
    let mut at = 0;
    for word in words.by_ref() {
        let found = specials(u64::from_le_bytes(word.try_into().expect("eight bytes")));
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    if let Some(i) = words.remainder().iter().position(|&b| special(b)) {
        return Some(at + i);
    }
    rest_end(&bytes[head.len()..]).map(|i| head.len() + i)
}

/// [`string_end`] past its first [`SHORT_STRING`] bytes, natively: the
/// first quote or backslash found with SSE2/AVX2 (memchr), and the bytes
/// before it checked for control characters in one pass without branches.
#[cfg(not(target_arch = "wasm32"))]
fn rest_end(rest: &[u8]) -> Option<usize> {
    let end = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
    let before = &rest[..end];
    if before.iter().fold(false, |seen, &b| seen | (b < 0x20)) {
        return before.iter().position(|&b| b < 0x20);
    }
    (end < rest.len()).then_some(end)
}

/// [`string_end`] past its first [`SHORT_STRING`] bytes, in WebAssembly.
#[cfg(target_arch = "wasm32")]
fn rest_end(rest: &[u8]) -> Option<usize> {
    blocks_end(rest)
}

/// How many bytes [`blocks_end`] looks at in one step.
const BLOCK: usize = 32;

/// Where the first quote, backslash or control character of `bytes` is, a
/// [`BLOCK`] at a time: with simd128, two `v128` loads and three compares
/// each for all three kinds at once. (WebAssembly's memchr followed by a
/// control-character pass, as natively, cost 2.5 instructions a byte: LLVM
/// folds a `bool` a lane at a time there; an `u8` it keeps in `v128`,
/// [`special`] included.)
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn blocks_end(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    for block in bytes.chunks_exact(BLOCK) {
        let block: &[u8; BLOCK] = block.try_into().expect("a whole block");
        let mut found = 0u8;
        for &b in block {
            found |= u8::from(special(b));
        }
        if found != 0 {
            break;
        }
        at += BLOCK;
    }
    bytes[at..].iter().position(|&b| special(b)).map(|i| at + i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::tests::mapper;

    /// Whether the quick reader read `payload` itself, and the id it read.
    fn read(payload: &str) -> Option<i64> {
        let mapper = mapper();
        let mut slots: Vec<Option<Typed<'_>>> = mapper.columns().iter().map(|_| None).collect();
        read_flat_object(&mapper, payload, &mut slots).then(|| match slots[0] {
            Some(Typed::BigInt(id)) => id,
            _ => -1,
        })
    }

    #[test]
    fn reads_flat_objects_itself() {
        assert_eq!(read(r#"{"id":7,"name":"a","amount":"1.50"}"#), Some(7));
        assert_eq!(
            read(r#" { "name" : "ü ✓" , "id" : -7 , "extra" : [1, {"a": null}] } "#),
            Some(-7)
        );
        assert_eq!(read(r#"{"id":1,"id":2}"#), Some(2), "the last of a key wins");
        assert_eq!(
            read(r#"{"name":"a"}"#),
            Some(-1),
            "a missing column is the caller's to refuse"
        );
    }

    #[test]
    fn leaves_what_it_is_not_sure_of_to_the_parser() {
        for payload in [
            r#"{"id":7,"name":"a\"b"}"#,
            r#"{"id":7,"na\u006de":"a"}"#,
            "{\"id\":7,\"name\":\"tab\tinside\"}",
            r#"{"id":-0}"#,
            r#"{"id":1234567890123456789}"#,
            r#"{"id":7,"x":1e400}"#,
            r#"{"id":7,"name":{}}"#,
            r#"{"id":"x"}"#,
            r#"{"id":7,}"#,
            r#"{"id":7} x"#,
            r#"{"id":07}"#,
            "[1]",
            "",
        ] {
            assert_eq!(read(payload), None, "{payload}");
        }
        let deep = |n: usize| format!(r#"{{"id":1,"x":{}{}}}"#, "[".repeat(n), "]".repeat(n));
        assert_eq!(read(&deep(MAX_DEPTH - 1)), Some(1));
        assert_eq!(read(&deep(MAX_DEPTH)), None);
    }

    #[test]
    fn string_end_finds_the_first_quote_backslash_or_control_character() {
        for len in 0..(SHORT_STRING * 3) {
            for at in 0..len {
                for special in [b'"', b'\\', 0x00, 0x1f] {
                    for before in [b'a', 0x20, 0x7f, 0x80, 0xff, b'"' + 1, b'\\' - 1] {
                        let mut bytes = vec![before; len];
                        bytes[at] = special;
                        // A second one after it must not be found first.
                        if at + 1 < len {
                            bytes[len - 1] = b'"';
                        }
                        assert_eq!(string_end(&bytes), Some(at), "{bytes:?}");
                        // WebAssembly's search, checked here too.
                        assert_eq!(blocks_end(&bytes), Some(at), "{bytes:?}");
                    }
                }
            }
            assert_eq!(string_end(&vec![b'a'; len]), None);
            assert_eq!(blocks_end(&vec![b'a'; len]), None);
        }
    }
}
