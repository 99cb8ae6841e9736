//! Maps each JSON object payload onto one row of the sink's table by column
//! name: NULL for a missing nullable column, a dead letter for a missing NOT
//! NULL column or a value that cannot convert. Config `kind` (append, upsert
//! or delete; default append) sets the row kind; `partial_update = "true"`
//! leaves a field missing from the payload out of the row (a partial update
//! of a primary-key table) instead of writing NULL.

use fluss_transform_sdk::{InitContext, Message, Output, RowKind, Transform, export_transform};

struct JsonToRow {
    kind: RowKind,
    partial: bool,
}

impl Transform for JsonToRow {
    fn init(ctx: &InitContext) -> Result<Self, String> {
        let kind = match ctx.get_or("kind", "append") {
            "append" => RowKind::Append,
            "upsert" => RowKind::Upsert,
            "delete" => RowKind::Delete,
            other => {
                return Err(format!(
                    "config `kind` must be append, upsert or delete, not `{other}`"
                ));
            }
        };
        let partial = ctx.flag("partial_update", false)?;
        Ok(JsonToRow { kind, partial })
    }

    fn process(&mut self, message: &Message<'_>, out: &mut Output<'_>) -> Result<(), String> {
        if self.partial {
            out.json_partial_row_to(None, self.kind, message.payload)
        } else {
            out.json_row(self.kind, message.payload)
        }
    }
}

export_transform!(JsonToRow);
