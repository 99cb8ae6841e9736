//! Returns zero rows for every message: measures the engine's fixed cost.

use fluss_transform_sdk::{InitContext, Message, Output, Transform, export_transform};

struct Noop;

impl Transform for Noop {
    fn init(_ctx: &InitContext) -> Result<Self, String> {
        Ok(Noop)
    }

    fn process(&mut self, _message: &Message<'_>, _out: &mut Output<'_>) -> Result<(), String> {
        Ok(())
    }
}

export_transform!(Noop);
