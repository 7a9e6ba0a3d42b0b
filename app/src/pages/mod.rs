pub mod admin;
pub mod batch;
pub mod home;
pub mod inbox;
pub mod job;
pub mod login;
pub mod not_found;
pub mod search;
