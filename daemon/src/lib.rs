//! placeholder
pub mod a2a;
pub mod cli;
pub mod mcp;
pub mod metrics;
pub mod plugins;
pub mod rest;
pub mod server;
pub mod state;
pub mod tools;
