//! The integration tests, linked as one binary: the real `deepcli` binary driven end to end
//! (temp dirs, real SQLite, real child processes, HTTP on loopback, the ACP peers `scripts/test`
//! installs), and the library's public surface tested from outside.

mod a2a;
mod a2a_files;
mod a2a_grpc;
mod a2a_push;
mod a2a_remote;
mod access;
mod adapters;
mod apply;
mod approvals;
mod backup;
mod budgets;
mod cli;
mod cluster;
mod common;
mod config_keys;
mod console;
mod examples;
mod first_hour;
mod first_run;
mod hub;
mod isolation;
mod json_keys;
mod loader;
mod manage;
mod openclaw;
mod operator_rpc;
mod policy;
mod retention;
mod route;
mod routing;
mod rules;
mod runtimes;
mod schemas;
mod secrets;
mod status;
mod tasks;
mod tidy;
mod traces;
mod trash;
mod up;
