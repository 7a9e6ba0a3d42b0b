pub mod charts;
pub mod layout;
pub mod progress;
pub mod toast;
