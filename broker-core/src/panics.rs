//! What a caught panic said, for the error that reports it.

use std::any::Any;

/// The message of a panic's payload (`panic!` with a literal or a formatted message), or a
/// placeholder for any other payload.
pub(crate) fn text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-text panic payload".into()
    }
}
