//! One reading of a payload for both its row and the field a transform
//! routes it by (a tenant, say), instead of a whole reading for each: the
//! field is read as one more STRING column the row leaves out.

use super::{JsonMapper, MapError, Typed};
use crate::types::{Column, DataType};
use crate::{RowKind, RowSink};

/// What [`JsonMapper::map_routed_into`] made of a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routed<E> {
    /// Its row was added.
    Written,
    /// The payload did not map onto the columns (not JSON, not an object,
    /// a value that does not convert): nothing was added and the route was
    /// not asked. Reading the field and mapping the row apart tells which
    /// refusal comes first.
    Unparsed(MapError),
    /// The route refused the field's value.
    Refused(E),
    /// The route picked a table this reading has no row for: nothing was
    /// added.
    Declined,
    /// A NOT NULL column has no value: nothing was added.
    Missing(MapError),
}

impl JsonMapper {
    /// This mapper, also reading top-level field `name` as a nullable
    /// STRING column would (the text [`super::JsonField::text`] gives) for
    /// [`JsonMapper::map_routed_into`]. A column of that name is read for
    /// it when it is a STRING column; `None` when it is of another type,
    /// whose conversion would differ.
    pub fn reading_field(mut self, name: &str) -> Option<Self> {
        match self.columns().iter().position(|c| c.name == name) {
            Some(i) if self.columns[i].data_type == DataType::String => self.field = Some(i),
            Some(_) => return None,
            None => {
                self.columns.truncate(self.visible);
                self.columns.push(Column::new(name, DataType::String, true));
                self.field = Some(self.visible);
            }
        }
        Some(self)
    }

    /// [`JsonMapper::map_into`] for a row whose table depends on a field of
    /// the payload (see [`JsonMapper::reading_field`]), reading the payload
    /// once: `route` is given the field's text (`None` when it is missing,
    /// `null` or not a string) and gives the row's table, or `None` when it
    /// is one this mapper's columns are not those of. On anything but
    /// [`Routed::Written`] nothing was added to `out`. A mapper without a
    /// field read gives `route` nothing.
    pub fn map_routed_into<S: RowSink + ?Sized, E>(
        &self,
        payload: &[u8],
        kind: RowKind,
        out: &mut S,
        route: impl FnOnce(Option<&str>) -> Result<Option<u16>, E>,
    ) -> Routed<E> {
        let mut inline = super::Inline::default();
        let mut heap = Vec::new();
        let slots = self.slots(&mut inline, &mut heap);
        if let Err(e) = self.parse(payload, slots) {
            return Routed::Unparsed(e);
        }
        let text = match self.field.map(|i| &slots[i]) {
            Some(Some(Typed::Text(text))) => Some(&**text),
            _ => None,
        };
        let table = match route(text) {
            Ok(Some(table)) => table,
            Ok(None) => return Routed::Declined,
            Err(e) => return Routed::Refused(e),
        };
        match self.emit(slots, kind, table, out) {
            Ok(()) => Routed::Written,
            Err(e) => Routed::Missing(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RowsBuilder;
    use crate::json::JsonField;

    fn mapper() -> JsonMapper {
        JsonMapper::new(vec![
            Column::new("id", DataType::BigInt, false),
            Column::new("name", DataType::String, true),
            Column::new("score", DataType::Double, true),
        ])
    }

    /// What reading the field and then mapping the row apart gives: the
    /// field's text or why it could not be read, and the row's bytes or why
    /// it was refused.
    fn apart(
        mapper: &JsonMapper,
        field: &str,
        payload: &str,
    ) -> (Result<Option<String>, MapError>, Result<Vec<u8>, MapError>) {
        let text = JsonField::new(field).text(payload.as_bytes());
        let mut rows = RowsBuilder::new();
        let row = mapper.map_into(payload.as_bytes(), RowKind::Append, 3, &mut rows);
        (text, row.map(|()| rows.into_bytes()))
    }

    #[test]
    fn one_reading_gives_the_field_and_the_row_of_two() {
        let payloads = [
            r#"{"id":1,"name":"a","score":2.5,"tenant":"acme"}"#,
            r#"{"tenant":"acme","id":2}"#,
            r#"{"id":3,"tenant":null}"#,
            r#"{"id":4}"#,
            r#"{"id":5,"tenant":42}"#,
            r#"{"id":6,"tenant":true,"name":"x"}"#,
            r#"{"id":7,"tenant":"a","tenant":"b"}"#,
            r#"{"id":8,"tenant":"t\u00e9"}"#,
            r#"{"id":9,"tenant":{"x":1}}"#,
            r#"{"id":10,"tenant":[1]}"#,
            r#"{"tenant":"acme"}"#,
            r#"{"id":"x","tenant":"acme"}"#,
            r#"{"id":11,"score":"high","tenant":"acme"}"#,
            r#"{"id":12,"tenant":"acme""#,
            r#"[1]"#,
            r#"{"id":13,"extra":{"tenant":"inner"},"tenant":"outer"}"#,
        ];
        for field in ["tenant", "name"] {
            let mapper = mapper();
            let routed = mapper.clone().reading_field(field).unwrap();
            assert_eq!(
                routed.columns(),
                mapper.columns(),
                "the rows' columns are the same"
            );
            for payload in payloads {
                let (text, row) = apart(&mapper, field, payload);
                let mut rows = RowsBuilder::new();
                let mut seen = None;
                let done = routed.map_routed_into(payload.as_bytes(), RowKind::Append, &mut rows, |t| {
                    seen = Some(t.map(str::to_string));
                    Ok::<_, ()>(Some(3))
                });
                match (&text, &row, done) {
                    (Ok(text), Ok(row), Routed::Written) => {
                        assert_eq!(seen.as_ref(), Some(text), "{field} in {payload}");
                        assert_eq!(&rows.into_bytes(), row, "{payload}");
                    }
                    (Ok(text), Err(e @ MapError::MissingValue(_)), Routed::Missing(missing)) => {
                        assert_eq!(seen.as_ref(), Some(text), "{field} in {payload}");
                        assert_eq!(&missing, e, "{payload}");
                        assert!(rows.into_bytes().is_empty());
                    }
                    (_, _, Routed::Unparsed(e)) => {
                        assert!(seen.is_none(), "the route is not asked: {payload}");
                        assert!(
                            text.as_ref().err() == Some(&e) || row.as_ref().err() == Some(&e),
                            "{payload}: {e}"
                        );
                        assert!(rows.into_bytes().is_empty());
                    }
                    (text, row, done) => panic!("{payload}: {text:?} {row:?} {done:?}"),
                }
            }
        }
    }

    #[test]
    fn the_route_declines_refuses_and_picks_the_table() {
        let routed = mapper().reading_field("tenant").unwrap();
        let payload = br#"{"id":1,"tenant":"acme"}"#;
        let mut rows = RowsBuilder::new();
        let declined = routed.map_routed_into(payload, RowKind::Append, &mut rows, |_| Ok::<_, ()>(None));
        assert_eq!(declined, Routed::Declined);
        let refused =
            routed.map_routed_into(
                payload,
                RowKind::Append,
                &mut rows,
                |t| Err(t.map(str::to_string)),
            );
        assert_eq!(refused, Routed::Refused(Some("acme".to_string())));
        assert!(rows.into_bytes().is_empty(), "nothing added");
        let mut rows = RowsBuilder::new();
        let written = routed.map_routed_into(payload, RowKind::Upsert, &mut rows, |_| Ok::<_, ()>(Some(7)));
        assert_eq!(written, Routed::Written);
        let mut expected = RowsBuilder::new();
        mapper()
            .map_into(payload, RowKind::Upsert, 7, &mut expected)
            .unwrap();
        assert_eq!(rows.into_bytes(), expected.into_bytes());
    }

    #[test]
    fn a_column_of_the_fields_name_is_read_for_it_when_it_is_a_string() {
        assert!(
            mapper().reading_field("score").is_none(),
            "a DOUBLE converts otherwise"
        );
        let routed = mapper().reading_field("name").unwrap();
        assert_eq!(routed.columns().len(), 3, "no column added");
        let twice = mapper()
            .reading_field("tenant")
            .unwrap()
            .reading_field("region")
            .unwrap();
        assert_eq!(twice.columns(), mapper().columns(), "one field read at a time");
    }
}
