//! The column types `evolve_schema` gives new JSON fields
//! (`fluss_row_codec::json::field_types`): for any payload it reads, each
//! field's type takes every value the field has in it, so the payload maps
//! onto columns of those types with no field left without a column, on
//! every reader; a payload it refuses, the mapping refuses too.
#![no_main]

use fluss_row_codec::json::{JsonMapper, JsonParser, UnknownFields, field_types};
use fluss_row_codec::{Column, RowKind, RowsBuilder};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|payload: &[u8]| {
    let text = String::from_utf8_lossy(payload);
    let columns: Vec<Column> = match field_types(payload) {
        Ok(fields) => fields
            .into_iter()
            .map(|(name, data_type)| Column::new(name, data_type, true))
            .collect(),
        Err(refusal) => {
            let mut out = RowsBuilder::new();
            let mapped = JsonMapper::new(Vec::new()).map_into(payload, RowKind::Append, 0, &mut out);
            assert!(mapped.is_err(), "{refusal}, but the mapping takes {text:?}");
            return;
        }
    };
    for parser in [JsonParser::Sonic, JsonParser::SerdeJson] {
        for flat_first in [true, false] {
            let mapper = JsonMapper::new(columns.clone())
                .unknown_fields(UnknownFields::Refuse)
                .nested_as_text(true)
                .with_parser(parser)
                .flat_first(flat_first);
            let mut out = RowsBuilder::new();
            if let Err(e) = mapper.map_into(payload, RowKind::Append, 0, &mut out) {
                panic!("{parser:?}, flat first {flat_first}: {e}; columns {columns:?}, payload {text:?}");
            }
        }
    }
});
