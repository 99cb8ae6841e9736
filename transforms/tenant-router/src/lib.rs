//! Keeps only messages whose JSON field `filter_field` equals `filter_value`
//! (both optional) and routes each to table `<database>.<prefix><tenant>`,
//! where the tenant comes from the payload field `tenant_field` (or else the
//! header of that name). Config: `database` (default: the sink table's
//! database), `prefix` (default ""), `tenant_field` (default "tenant"),
//! `filter_field`, `filter_value`. Rows are upserts when the sink's table has
//! a primary key, appends otherwise. A message without a usable tenant is
//! dead-lettered.

use std::borrow::Cow;

use fluss_transform_sdk::{
    InitContext, JsonField, Message, Output, RowKind, Transform, export_transform, same_bytes,
};

/// The most tenants whose table names are kept between messages.
const KEPT_TABLE_NAMES: usize = 64;

struct TenantRouter {
    database: String,
    prefix: String,
    tenant_field: String,
    /// Reads `tenant_field` from each payload.
    tenant: JsonField,
    /// The filter's field reader and the value it keeps.
    filter: Option<(JsonField, String)>,
    kind: RowKind,
    /// `(tenant, table name)` of the tenants met, so that a message does
    /// not build its table's name anew.
    tables: Vec<(String, String)>,
}

impl TenantRouter {
    /// The name of `tenant`'s table.
    fn table_of(&mut self, tenant: &str) -> Cow<'_, str> {
        let kept = (self.tables.iter()).position(|(t, _)| same_bytes(t.as_bytes(), tenant.as_bytes()));
        if let Some(i) = kept {
            return Cow::Borrowed(&self.tables[i].1);
        }
        let table = format!("{}.{}{}", self.database, self.prefix, tenant);
        if self.tables.len() >= KEPT_TABLE_NAMES {
            return Cow::Owned(table);
        }
        self.tables.push((tenant.to_string(), table));
        Cow::Borrowed(&self.tables.last().expect("just kept").1)
    }
}

fn field(payload: &[u8], reader: &JsonField) -> Result<Option<String>, String> {
    reader.text(payload).map_err(|e| e.to_string())
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
        let tenant_field = ctx.get_or("tenant_field", "tenant").to_string();
        Ok(TenantRouter {
            database: ctx.get_or("database", default_db).to_string(),
            prefix: ctx.get_or("prefix", "").to_string(),
            tenant: JsonField::new(&tenant_field),
            tenant_field,
            filter,
            kind,
            tables: Vec::new(),
        })
    }

    fn process(&mut self, message: &Message<'_>, out: &mut Output<'_>) -> Result<(), String> {
        if let Some((reader, wanted)) = &self.filter
            && field(message.payload, reader)?.as_deref() != Some(wanted.as_str())
        {
            return Ok(());
        }
        let tenant = match field(message.payload, &self.tenant)? {
            Some(t) => t,
            None => message
                .header_str(&self.tenant_field)
                .map(str::to_string)
                .ok_or_else(|| format!("no tenant: neither a `{}` field nor header", self.tenant_field))?,
        };
        if tenant.is_empty() || !tenant.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!(
                "tenant `{tenant}` is not a plain identifier (letters, digits, _)"
            ));
        }
        let kind = self.kind;
        let table = self.table_of(&tenant);
        out.json_row_to(Some(&table), kind, message.payload)
    }
}

export_transform!(TenantRouter);
