// tenant-router in JavaScript: keeps messages whose JSON field `filter_field`
// equals `filter_value` (both optional) and routes each to table
// `<database>.<prefix><tenant>`, the tenant read from the payload field
// `tenant_field` (default "tenant") or else the header of that name. Rows are
// upserts when the sink's table has a primary key, appends otherwise.

import { APPEND, UPSERT, DeadLetter, Mapper, numberText, parseObject, run } from './fluss-sink.js';

let s;

/** The text of a top-level JSON field: strings as they are, numbers and booleans as JSON text. */
function field(payload, name) {
  const v = parseObject(payload)[name];
  if (v === undefined || v === null || typeof v === 'string') return v ?? undefined;
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'number') return numberText(v);
  throw new DeadLetter(`column \`${name}\` (STRING): found ${Array.isArray(v) ? 'an array' : 'an object'}, expected a STRING`);
}

export function init(config, tables) {
  const settings = Object.fromEntries(config);
  const table = tables[0];
  const [filterField, filterValue] = [settings.filter_field, settings.filter_value];
  if ((filterField === undefined) !== (filterValue === undefined)) {
    throw 'set both `filter_field` and `filter_value`, or neither';
  }
  s = {
    mapper: new Mapper(table.columns),
    database: settings.database ?? table.path.split('.')[0],
    prefix: settings.prefix ?? '',
    tenantField: settings.tenant_field ?? 'tenant',
    filter: filterField === undefined ? undefined : [filterField, filterValue],
    kind: table.primaryKey.length > 0 ? UPSERT : APPEND,
  };
}

export function process(batch) {
  return run(batch, (message, out) => {
    if (s.filter && field(message.payload, s.filter[0]) !== s.filter[1]) return 0;
    let tenant = field(message.payload, s.tenantField) ?? message.headerStr(s.tenantField);
    if (tenant === undefined) throw new DeadLetter(`no tenant: neither a \`${s.tenantField}\` field nor header`);
    if (!/^[A-Za-z0-9_]+$/.test(tenant)) {
      throw new DeadLetter(`tenant \`${tenant}\` is not a plain identifier (letters, digits, _)`);
    }
    const table = out.tableIndex(`${s.database}.${s.prefix}${tenant}`);
    s.mapper.encode(out.rows, s.kind, table, message.payload);
    return 1;
  });
}
