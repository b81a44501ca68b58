//! The sinks the command line uses: bcc's printer on standard output
//! ([`print`]), output files ([`files`]) and warnings about what the
//! kernel could not record ([`warnings`]). The live view's sink lives
//! with the live view ([`crate::live::sink`]). Each implements
//! [`crate::pipeline::Sink`] and sees only the model.

pub mod files;
pub mod print;
pub mod warnings;

pub use files::{Destination, Files};
pub use print::{Printer, PrinterOptions};
pub use warnings::Warnings;
