"""json-to-row in Python: each JSON object payload becomes one row of the
sink's table by column name. Config `kind`: append (default), upsert or delete;
`partial_update`: "true" leaves fields missing from a payload out of the row
(a partial update)."""

from componentize_py_types import Err

import fluss_sink
import wit_world

_state = {}


class WitWorld(wit_world.WitWorld):
    def init(self, config, tables):
        settings = dict(config)
        kind = settings.get("kind", "append")
        if kind not in fluss_sink.KINDS:
            raise Err(f"config `kind` must be append, upsert or delete, not `{kind}`")
        partial = settings.get("partial_update", "false")
        if partial not in ("true", "false"):
            raise Err(f"config `partial_update` must be true or false, not `{partial}`")
        try:
            _state["mapper"] = fluss_sink.Mapper(tables[0].columns, partial == "true")
        except ValueError as e:
            raise Err(str(e))
        _state["kind"] = fluss_sink.KINDS[kind]

    def process(self, batch):
        mapper, kind = _state["mapper"], _state["kind"]

        def handle(message, out):
            out.rows += mapper.encode(kind, 0, message.payload)
            return 1

        return fluss_sink.run(batch, handle)
