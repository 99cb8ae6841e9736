"""tenant-router in Python: keeps messages whose JSON field `filter_field`
equals `filter_value` (both optional) and routes each to table
`<database>.<prefix><tenant>`, the tenant read from the payload field
`tenant_field` (default "tenant") or else the header of that name. Rows are
upserts when the sink's table has a primary key, appends otherwise."""

from componentize_py_types import Err

import fluss_sink
import wit_world

_state = {}


def _field(payload, name):
    """The text of a top-level JSON field: strings as they are, numbers and
    booleans as their JSON text; objects and arrays are refused."""
    v = fluss_sink.parse_object(payload).get(name)
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return fluss_sink.number_text(v)
    what = "an object" if isinstance(v, dict) else "an array"
    raise ValueError(f"column `{name}` (STRING): found {what}, expected a STRING")


class WitWorld(wit_world.WitWorld):
    def init(self, config, tables):
        settings = dict(config)
        table = tables[0]
        filter_field, filter_value = settings.get("filter_field"), settings.get("filter_value")
        if (filter_field is None) != (filter_value is None):
            raise Err("set both `filter_field` and `filter_value`, or neither")
        try:
            mapper = fluss_sink.Mapper(table.columns)
        except ValueError as e:
            raise Err(str(e))
        _state.update(
            mapper=mapper,
            database=settings.get("database", table.path.split(".", 1)[0]),
            prefix=settings.get("prefix", ""),
            tenant_field=settings.get("tenant_field", "tenant"),
            filter=(filter_field, filter_value) if filter_field is not None else None,
            kind=fluss_sink.UPSERT if table.primary_key else fluss_sink.APPEND,
        )

    def process(self, batch):
        s = _state

        def handle(message, out):
            if s["filter"] and _field(message.payload, s["filter"][0]) != s["filter"][1]:
                return 0
            tenant = _field(message.payload, s["tenant_field"])
            if tenant is None:
                tenant = message.header_str(s["tenant_field"])
            if tenant is None:
                raise ValueError(f"no tenant: neither a `{s['tenant_field']}` field nor header")
            if not tenant or not all(c.isascii() and (c.isalnum() or c == "_") for c in tenant):
                raise ValueError(f"tenant `{tenant}` is not a plain identifier (letters, digits, _)")
            table = out.table_index(f"{s['database']}.{s['prefix']}{tenant}")
            out.rows += s["mapper"].encode(s["kind"], table, message.payload)
            return 1

        return fluss_sink.run(batch, handle)
