//! The connectors runtime's C ABI. Only this module touches what the runtime
//! hands over; [`decode`] turns its postcard buffers into a [`crate::batch::MessageBatch`].

pub mod decode;
