//! GigaAM's front end.
