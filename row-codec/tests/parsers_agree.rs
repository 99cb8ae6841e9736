//! The native parser (sonic-rs) and the guests' (serde_json), each behind
//! the quick reader of flat objects, give the same rows and the same
//! refusals, word for word, as serde_json alone, for the same payloads.

use fluss_row_codec::json::{JsonMapper, JsonParser};
use fluss_row_codec::{Column, DataType, RowKind, RowsBuilder};
use proptest::prelude::*;

fn columns() -> Vec<Column> {
    let col = |name: &str, ty: &str, nullable| Column::new(name, ty.parse::<DataType>().unwrap(), nullable);
    vec![
        col("id", "BIGINT", false),
        col("name", "STRING", true),
        col("score", "DOUBLE", true),
        col("ratio", "FLOAT", true),
        col("active", "BOOLEAN", true),
        col("small", "SMALLINT", true),
        col("amount", "DECIMAL(10, 2)", true),
        col("day", "DATE", true),
        col("at", "TIMESTAMP(6)", true),
        col("ltz", "TIMESTAMP_LTZ(3)", true),
        col("blob", "BYTES", true),
    ]
}

/// What `parser` makes of `payload` (after the quick reader of flat
/// objects): the encoded row, or the refusal's text.
fn mapped(parser: JsonParser, payload: &[u8]) -> Result<Vec<u8>, String> {
    mapped_by(JsonMapper::new(columns()).with_parser(parser), payload)
}

/// What serde_json alone makes of `payload`: the reference.
fn reference(payload: &[u8]) -> Result<Vec<u8>, String> {
    mapped_by(
        JsonMapper::new(columns())
            .with_parser(JsonParser::SerdeJson)
            .flat_first(false),
        payload,
    )
}

fn mapped_by(mapper: JsonMapper, payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = RowsBuilder::new();
    mapper
        .map_into(payload, RowKind::Append, 0, &mut out)
        .map(|()| out.into_bytes())
        .map_err(|e| e.to_string())
}

fn agree(payload: &[u8]) {
    let expected = reference(payload);
    for parser in [JsonParser::Sonic, JsonParser::SerdeJson] {
        assert_eq!(
            mapped(parser, payload),
            expected,
            "{parser:?}, payload {:?}",
            String::from_utf8_lossy(payload)
        );
    }
}

#[test]
fn the_native_default_is_sonic() {
    assert_eq!(JsonMapper::new(columns()).parser(), JsonParser::Sonic);
}

#[test]
fn tricky_payloads_map_alike() {
    let payloads: &[&[u8]] = &[
        br#"{"id":1,"name":"all","score":2.5,"active":true,"small":-4}"#,
        br#"{"id":"42","score":"2.25","active":"true","name":7,"small":3.0}"#,
        br#"{"id":2,"name":null,"extra":{"nested":[1,2,{"a":null}]},"more":[]}"#,
        "{\"id\":3,\"name\":\"ünïcødé ✓ \\\"quoted\\\" \\\\ back \\u00e9 \\ud83d\\ude00\"}".as_bytes(),
        br#"{"id":4,"name":"\ud800"}"#,
        br#"{"id":5,"score":1e3,"ratio":3.4028235e38,"small":32767}"#,
        br#"{"id":6,"score":1e400}"#,
        br#"{"id":7,"score":-0.0,"ratio":1e-50,"name":-0.0,"small":-0}"#,
        br#"{"id":8,"score":0.1000000000000000055511151231257827}"#,
        // Found by fuzzing: sonic-rs read `00` as a 0 and the mapping refused
        // that for BYTES; serde_json stops at the invalid number first.
        br#"{"id":8,"blob":00"AA70","name":"x"}"#,
        br#"{"id":9,"small":01}"#,
        br#"{"id":9,"small":40000}"#,
        br#"{"id":18446744073709551616}"#,
        br#"{"id":-9223372036854775808,"amount":"-12.345"}"#,
        br#"{"id":10,"amount":12345678.995,"day":"2026-12-01","at":"2026-12-01T10:00:00.123456Z"}"#,
        br#"{"id":11,"ltz":"2026-12-01T10:00:00+02:00","blob":"AAEC"}"#,
        br#"{"id":12,"blob":"not base64!"}"#,
        br#"{"id":13,"id":14}"#,
        br#"{"id":15}   "#,
        br#"  {"id":16}"#,
        br#"{"id":17} x"#,
        br#"{"id":18,}"#,
        br#"{"id":19 "name":"x"}"#,
        br#"{"id":01}"#,
        br#"{"id":1.}"#,
        br#"{"id":.5}"#,
        br#"{"id":20,"name":"tab	inside"}"#,
        br#"{"id":21,"name":"\x"}"#,
        b"{\"id\":22,\"name\":\"\xff\xfe\"}",
        b"{\"id\":23,\"\xc3\x28\":1}",
        br#"{"id":24,"name":"unterminated}"#,
        br#"{"id":25"#,
        br#"[1,2,3]"#,
        br#""a string""#,
        br#"null"#,
        br#"42"#,
        br#""#,
        br#"   "#,
        b"this is not JSON",
        br#"{}"#,
        br#"{"id":NaN}"#,
        br#"{"id":true}"#,
        br#"{"id":[1]}"#,
        br#"{"active":"yes","id":26}"#,
        br#"{"id":27,"name":{"deep":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]}}"#,
        // What the quick reader of flat objects reads itself or leaves to
        // the parser.
        b" \t\r\n{ \"id\" : 28 ,\n\"name\"\t:\r\"spaced\" , \"small\":-7 } \n",
        br#"{"id":29,"name":"","":1,"small":0,"score":-0.5e-3,"ratio":1E+2}"#,
        r#"{"id":30,"name":"ünï ✓ 😀 wide","other":"é"}"#.as_bytes(),
        br#"{"id":31,"other":18446744073709551616,"x":-0,"y":1e400,"z":123456789012345678901234}"#,
        br#"{"id":999999999999999999,"small":-32768}"#,
        br#"{"id":1000000000000000000}"#,
        br#"{"id":-999999999999999999}"#,
        br#"{"id":-0}"#,
        br#"{"id":32,"score":-0}"#,
        br#"{"id":33,"name":"a\"b","other":"c\\d"}"#,
        br#"{"id":34,"other":"\u0041","x":{"a":[true,false,null,{"b":"\n"}]}}"#,
        b"{\"id\":35,\"other\":\"ctl\x01inside\"}",
        b"{\"id\":36,\"name\":\"del\x7finside\"}",
        br#"{"id":37,"x":[1,2,],"name":"x"}"#,
        br#"{"id":38,"x":{"a":1,},"name":"x"}"#,
        br#"{"id":39,"x":{"a" 1},"name":"x"}"#,
        br#"{"id":40,"x":[1 2]}"#,
        br#"{"id":41,"x":tru}"#,
        br#"{"id":42,"x":nul,"name":"y"}"#,
        br#"{"id":43,"x":-,"name":"y"}"#,
        br#"{"id":44,"x":1e,"name":"y"}"#,
        br#"{"id":45,"x":1.5e+,"name":"y"}"#,
        br#"{"id":46,"x":+1}"#,
        br#"{"id":47,,"name":"y"}"#,
        br#"{,"id":48}"#,
        br#"{"id":49}}"#,
        br#"{"id":50}{"id":51}"#,
        br#"{"id":52,"active":tRue}"#,
        br#"{"id":53,"name":true,"score":false,"active":null}"#,
        br#"{"id":54,"name":"x","name":"y","name":null}"#,
        br#"{"id":55,"small":"12","amount":12.5,"day":20000,"at":1700000000000,"ltz":"2026-12-01T10:00:00Z"}"#,
        br#"{"id":56,"at":"2026-12-01 10:00:00","day":"2026-13-01"}"#,
        br#"{"id":57,"blob":"AAEC","amount":"99999999.99"}"#,
        br#"{"id":58,"amount":"999999999.99"}"#,
        br#"{"id":"59 ","small":" 3"}"#,
        br#"{"id":60,"name":["a"]}"#,
        br#"{"id":61,"name":{}}"#,
        br#"{"id":62,"x":[],"y":{},"z":[[]],"name":"ok"}"#,
    ];
    for payload in payloads {
        agree(payload);
    }
    for depth in [99, 100, 101, 127, 128, 129, 300] {
        let deep = format!(r#"{{"id":1,"x":{}1{}}}"#, "[".repeat(depth), "]".repeat(depth));
        agree(deep.as_bytes());
        let deep = format!(r#"{{"id":1,"name":{}1{}}}"#, "[".repeat(depth), "]".repeat(depth));
        agree(deep.as_bytes());
    }
    // Around the quick reader's own depth limit, in arrays and objects.
    for depth in [62, 63, 64, 65, 66] {
        let deep = format!(
            r#"{{"id":1,"x":{}1{},"name":"n"}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        agree(deep.as_bytes());
        let deep = format!(
            r#"{{"id":1,"x":{}1{},"name":"n"}}"#,
            r#"{"a":"#.repeat(depth),
            "}".repeat(depth)
        );
        agree(deep.as_bytes());
    }
    // A quote, backslash or control character at every place of a string
    // that spans the reader's eight-byte words, or goes past the part it
    // reads that way (64 bytes) into the part memchr finds the end of.
    for len in (0..20).chain(60..72).chain(128..132) {
        for at in 0..len {
            for special in [b'"', b'\\', 0x01, 0x1f, 0x7f, 0xc3] {
                let mut text = vec![b'a'; len];
                text[at] = special;
                let mut payload = br#"{"id":1,"name":""#.to_vec();
                payload.extend_from_slice(&text);
                payload.extend_from_slice(br#"","small":2}"#);
                agree(&payload);
            }
        }
    }
}

/// A payload nested far deeper than any stack allows is refused, in an
/// ignored field and in a mapped one, on a thread with the stack of the
/// plugin's worker threads (2 MiB).
#[test]
fn nesting_past_any_stack_is_refused_not_a_crash() {
    let deep = |field: &str| format!(r#"{{"id":1,"{field}":{}}}"#, "[".repeat(200_000));
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            for field in ["ignored", "name"] {
                let refusal = mapped(JsonParser::Sonic, deep(field).as_bytes()).unwrap_err();
                assert!(refusal.starts_with("payload is not valid JSON"), "{refusal}");
            }
            // Found by fuzzing (AddressSanitizer, 1,860 levels): a field
            // without a column, refused when new fields add columns, was
            // skipped by sonic-rs's own recursion.
            let refusing = JsonMapper::new(columns())
                .with_parser(JsonParser::Sonic)
                .unknown_fields(fluss_row_codec::json::UnknownFields::Refuse);
            assert!(mapped_by(refusing, deep("ignored").as_bytes()).is_err());
            // Found by fuzzing (a debug build overflowed at 200 levels): a
            // payload that is itself a deep array, not an object.
            for payload in [
                "[".repeat(200_000),
                format!("[[{}{{\"id\":1}}", "[".repeat(200_000)),
            ] {
                for parser in [JsonParser::Sonic, JsonParser::SerdeJson] {
                    assert!(mapped(parser, payload.as_bytes()).is_err());
                }
            }
        })
        .unwrap()
        .join()
        .unwrap();
}

fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<i64>().prop_map(|i| i.to_string()),
        any::<u64>().prop_map(|i| i.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| f.to_string()),
        "[ -~]{0,12}".prop_map(|s| format!("{s:?}")),
        "\\PC{0,8}".prop_map(|s| serde_json::to_string(&s).unwrap()),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(("[a-z]{1,6}", inner), 0..4).prop_map(|kv| {
                let fields: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

proptest! {
    #[test]
    fn generated_objects_map_alike(
        fields in prop::collection::vec(
            (prop::sample::select(vec!["id", "name", "score", "ratio", "active", "small", "amount", "day", "at", "ltz", "blob", "other"]), json_value()),
            0..8,
        ),
        cut in any::<prop::sample::Index>(),
    ) {
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
        let payload = format!("{{{}}}", body.join(","));
        agree(payload.as_bytes());
        // And every prefix of it, mostly invalid JSON.
        let at = cut.index(payload.len() + 1);
        if payload.is_char_boundary(at) {
            agree(&payload.as_bytes()[..at]);
        }
    }
}
