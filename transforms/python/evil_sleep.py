"""TEST ONLY. A Python transform that waits through WASI's clocks: on a
message whose payload is config `trigger` (default "poison") it calls
time.sleep(config `seconds`, default 120) (config `mode` = "sleep", the
default) or reads time.monotonic() in a loop until that long has passed on it
(`mode` = "clock-spin"); every message becomes one row [offset BIGINT]. It
proves that a guest waiting on a clock cannot hold the host past call_timeout."""

import struct
import time

import fluss_sink
import wit_world

_state = {}


class WitWorld(wit_world.WitWorld):
    def init(self, config, tables):
        settings = dict(config)
        _state["trigger"] = settings.get("trigger", "poison").encode()
        _state["seconds"] = float(settings.get("seconds", "120"))
        _state["spin"] = settings.get("mode", "sleep") == "clock-spin"

    def process(self, batch):
        trigger, seconds, spin = _state["trigger"], _state["seconds"], _state["spin"]

        def handle(message, out):
            if message.payload == trigger:
                if spin:
                    until = time.monotonic() + seconds
                    while time.monotonic() < until:
                        pass
                else:
                    time.sleep(seconds)
            # One BIGINT cell (tag 5) in an append row of the sink's table.
            out.rows += struct.pack("<BHHBq", fluss_sink.APPEND, 0, 1, 5, message.offset)
            return 1

        return fluss_sink.run(batch, handle)
