//! Keeps only messages whose JSON field `filter_field` equals `filter_value`
//! (both optional) and routes each to table `<database>.<prefix><tenant>`,
//! where the tenant comes from the payload field `tenant_field` (or else the
//! header of that name). Config: `database` (default: the sink table's
//! database), `prefix` (default ""), `tenant_field` (default "tenant"),
//! `filter_field`, `filter_value`. Rows are upserts when the sink's table has
//! a primary key, appends otherwise. A message without a usable tenant is
//! dead-lettered. The payload is read once for its tenant and its row
//! (`Output::json_row_routed`).

use std::borrow::Cow;

use fluss_transform_sdk::{
    InitContext, JsonField, Message, Output, RowKind, Transform, export_transform, same_bytes,
};

/// The most tenants whose table names are kept between messages.
const KEPT_TABLE_NAMES: usize = 64;

struct TenantRouter {
    tenant_field: String,
    /// The filter's field reader and the value it keeps.
    filter: Option<(JsonField, String)>,
    kind: RowKind,
    tables: TableNames,
}

/// The tenants' table names, kept for the tenants met so that a message
/// does not build its table's name anew.
struct TableNames {
    database: String,
    prefix: String,
    /// `(tenant, table name)`.
    kept: Vec<(String, String)>,
}

impl TableNames {
    /// The name of `tenant`'s table.
    fn of(&mut self, tenant: &str) -> Cow<'_, str> {
        let kept = (self.kept.iter()).position(|(t, _)| same_bytes(t.as_bytes(), tenant.as_bytes()));
        if let Some(i) = kept {
            return Cow::Borrowed(&self.kept[i].1);
        }
        let table = format!("{}.{}{}", self.database, self.prefix, tenant);
        if self.kept.len() >= KEPT_TABLE_NAMES {
            return Cow::Owned(table);
        }
        self.kept.push((tenant.to_string(), table));
        Cow::Borrowed(&self.kept.last().expect("just kept").1)
    }
}

impl Transform for TenantRouter {
    fn init(ctx: &InitContext) -> Result<Self, String> {
        let table = &ctx.default_table().path;
        let default_db = table.split_once('.').map_or("", |(db, _)| db);
        let filter = match (ctx.config.get("filter_field"), ctx.config.get("filter_value")) {
            (Some(f), Some(v)) => Some((JsonField::new(f), v.clone())),
            (None, None) => None,
            _ => return Err("set both `filter_field` and `filter_value`, or neither".into()),
        };
        let kind = if ctx.default_table().primary_key.is_empty() {
            RowKind::Append
        } else {
            RowKind::Upsert
        };
        Ok(TenantRouter {
            tenant_field: ctx.get_or("tenant_field", "tenant").to_string(),
            filter,
            kind,
            tables: TableNames {
                database: ctx.get_or("database", default_db).to_string(),
                prefix: ctx.get_or("prefix", "").to_string(),
                kept: Vec::new(),
            },
        })
    }

    fn process(&mut self, message: &Message<'_>, out: &mut Output<'_>) -> Result<(), String> {
        if let Some((reader, wanted)) = &self.filter
            && reader
                .text(message.payload)
                .map_err(|e| e.to_string())?
                .as_deref()
                != Some(wanted.as_str())
        {
            return Ok(());
        }
        let (tenant_field, tables): (&str, _) = (&self.tenant_field, &mut self.tables);
        out.json_row_routed(tenant_field, self.kind, message.payload, move |from_payload| {
            let tenant = match from_payload {
                Some(t) => t,
                None => message
                    .header_str(tenant_field)
                    .ok_or_else(|| format!("no tenant: neither a `{tenant_field}` field nor header"))?,
            };
            if tenant.is_empty() || !tenant.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!(
                    "tenant `{tenant}` is not a plain identifier (letters, digits, _)"
                ));
            }
            // Moved in, so that the name may borrow from it past the call.
            let tables = tables;
            Ok(tables.of(tenant))
        })
    }
}

export_transform!(TenantRouter);
