//! One test binary for the crate: every integration test links once, which keeps
//! builds fast and small. Each module below is one former test file.

mod access_matrix;
mod accounts;
mod conn_caps;
mod conn_shutdown;
mod conn_timeouts;
mod cross_gateway;
mod gateway_leases;
mod group_fanout;
mod http_concurrency;
mod http_contract;
mod http_precedence;
mod input_rules;
mod lease_expiry;
mod membership_churn;
mod metrics;
mod nats_bus;
mod outcome_unknown;
mod pg_bus;
mod rate_limit;
mod raw_tcp;
mod recall_retention;
mod seed_case;
mod server_info;
mod sync_and_read;
mod two_gateways;
mod typing_presence;
mod verify_checks;
mod waits;
mod ws_bounds;
mod ws_delivery;
mod ws_idle;
mod ws_origin;
mod ws_ownership;
mod ws_protocol;
mod ws_support;
