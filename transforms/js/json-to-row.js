// json-to-row in JavaScript: each JSON object payload becomes one row of the
// sink's table by column name. Config `kind`: append (default), upsert or delete;
// `partial_update`: "true" leaves fields missing from a payload out of the row
// (a partial update).

import { KINDS, Mapper, run } from './fluss-sink.js';

let mapper;
let kind;

export function init(config, tables) {
  const settings = Object.fromEntries(config);
  const name = settings.kind ?? 'append';
  if (!(name in KINDS)) throw `config \`kind\` must be append, upsert or delete, not \`${name}\``;
  const partial = settings.partial_update ?? 'false';
  if (partial !== 'true' && partial !== 'false') {
    throw `config \`partial_update\` must be true or false, not \`${partial}\``;
  }
  mapper = new Mapper(tables[0].columns, partial === 'true');
  kind = KINDS[name];
}

export function process(batch) {
  return run(batch, (message, out) => {
    mapper.encode(out.rows, kind, 0, message.payload);
    return 1;
  });
}
