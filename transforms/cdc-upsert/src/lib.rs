//! Change-data-capture into a primary-key table: the operation comes from the
//! JSON field `op_field` (default "op") or else the header of that name:
//! `c`, `r` or `u` upserts the row, `d` deletes it by key. Columns are read
//! from the payload's fields by name (a delete needs only the key columns
//! and the NOT NULL ones). An unknown or missing op is dead-lettered. With
//! `partial_update = "true"`, an upsert updates only the fields its payload
//! has (the table's other columns keep their values).

use fluss_transform_sdk::{InitContext, JsonField, Message, Output, RowKind, Transform, export_transform};

struct CdcUpsert {
    op_field: String,
    /// Reads `op_field` from each payload.
    op: JsonField,
    partial: bool,
}

impl Transform for CdcUpsert {
    fn init(ctx: &InitContext) -> Result<Self, String> {
        if ctx.default_table().primary_key.is_empty() {
            return Err(format!(
                "cdc-upsert writes upserts and deletes, but table {} has no primary key",
                ctx.default_table().path
            ));
        }
        let partial = ctx.flag("partial_update", false)?;
        let op_field = ctx.get_or("op_field", "op").to_string();
        Ok(CdcUpsert {
            op: JsonField::new(&op_field),
            op_field,
            partial,
        })
    }

    fn process(&mut self, message: &Message<'_>, out: &mut Output<'_>) -> Result<(), String> {
        let op = match self.op.text(message.payload).map_err(|e| e.to_string())? {
            Some(op) => op,
            None => message
                .header_str(&self.op_field)
                .map(str::to_string)
                .ok_or_else(|| format!("no operation: neither an `{}` field nor header", self.op_field))?,
        };
        let kind = match op.as_str() {
            "c" | "r" | "u" => RowKind::Upsert,
            "d" => RowKind::Delete,
            other => return Err(format!("unknown operation `{other}`; expected c, r, u or d")),
        };
        if self.partial && kind == RowKind::Upsert {
            out.json_partial_row_to(None, kind, message.payload)
        } else {
            out.json_row(kind, message.payload)
        }
    }
}

export_transform!(CdcUpsert);
