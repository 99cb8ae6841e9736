//! Maps each JSON object payload onto one row of the sink's table by column
//! name: NULL for a missing nullable column, a dead letter for a missing NOT
//! NULL column or a value that cannot convert. Config `kind` (append, upsert
//! or delete; default append) sets the row kind.

use fluss_transform_sdk::{InitContext, Message, Output, RowKind, Transform, export_transform};

struct JsonToRow {
    kind: RowKind,
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
        Ok(JsonToRow { kind })
    }

    fn process(&mut self, message: &Message<'_>, out: &mut Output<'_>) -> Result<(), String> {
        out.json_row(self.kind, message.payload)
    }
}

export_transform!(JsonToRow);
