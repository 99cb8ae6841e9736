//! Rows whose table depends on a field of their payload, the payload read
//! once for the field and the row (see [`Output::json_row_routed`]).

use fluss_row_codec::json::{JsonField, JsonMapper, Routed};

use super::{DEFAULT_TABLE, Output, RowKind, Table, columns_of, table_index};

impl Output<'_> {
    /// Maps a JSON object onto one row of the table `route` names (a
    /// "database.table"), given the text of the payload's top-level field
    /// `field` as [`JsonField::text`] reads it (`None` when it is missing,
    /// `null` or not a string). It does what reading the field and then
    /// [`Output::json_row_to`] do, with the same refusals in the same
    /// order, but reads the payload once when the table has the sink
    /// table's columns (one the host did not describe).
    pub fn json_row_routed<T: AsRef<str>>(
        &mut self,
        field: &str,
        kind: RowKind,
        payload: &[u8],
        route: impl FnOnce(Option<&str>) -> Result<T, String>,
    ) -> Result<(), String> {
        let state = &mut *self.state;
        if state.routed.as_ref().is_none_or(|(name, _)| name != field) {
            let mapper = JsonMapper::new(state.tables[0].columns.clone()).reading_field(field);
            state.routed = Some((field.to_string(), mapper));
        }
        let mut route = Some(route);
        if let Some((_, Some(mapper))) = &state.routed {
            let (tables, named) = (&state.tables, &mut state.named);
            let mut chosen = DEFAULT_TABLE;
            let read = mapper.map_routed_into(payload, kind, self.rows, |text| {
                let route = route.take().expect("the route is asked once");
                chosen = table_index(tables, named, Some(route(text)?.as_ref()));
                Ok(has_sink_columns(tables, named, chosen).then_some(chosen))
            });
            match read {
                Routed::Written => return Ok(()),
                Routed::Refused(reason) => return Err(reason),
                Routed::Missing(e) => return Err(e.to_string()),
                Routed::Declined => return self.json_row_at(chosen, kind, payload),
                // Read apart below, for the refusal that comes first.
                Routed::Unparsed(_) => {}
            }
        }
        let text = JsonField::new(field).text(payload).map_err(|e| e.to_string())?;
        let route = route.take().expect("the route was not asked");
        let table = route(text.as_deref())?;
        self.json_row_to(Some(table.as_ref()), kind, payload)
    }
}

/// Whether rows of the table of index `index` have the sink table's
/// columns: its own, or one the host did not describe.
fn has_sink_columns(tables: &[Table], named: &[String], index: u16) -> bool {
    std::ptr::eq(columns_of(tables, named, index), tables[0].columns.as_slice())
}
