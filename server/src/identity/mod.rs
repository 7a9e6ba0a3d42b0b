//! Who is asking: passwords and logins ([`auth`]), the session store
//! ([`sessions`]), recently signed-in users and the credential listener
//! ([`signed_in`]), the login throttle ([`throttle`]).

pub mod auth;
pub mod sessions;
pub mod signed_in;
pub mod throttle;
