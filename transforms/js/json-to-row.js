// json-to-row in JavaScript: each JSON object payload becomes one row of the
// sink's table by column name. Config `kind`: append (default), upsert or delete.

import { KINDS, Mapper, run } from './fluss-sink.js';

let mapper;
let kind;

export function init(config, tables) {
  const settings = Object.fromEntries(config);
  const name = settings.kind ?? 'append';
  if (!(name in KINDS)) throw `config \`kind\` must be append, upsert or delete, not \`${name}\``;
  mapper = new Mapper(tables[0].columns);
  kind = KINDS[name];
}

export function process(batch) {
  return run(batch, (message, out) => {
    mapper.encode(out.rows, kind, 0, message.payload);
    return 1;
  });
}
