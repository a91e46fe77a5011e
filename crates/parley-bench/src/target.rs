//! What a run benchmarks: the gateways' URLs and admin token, given (`--url`) or started by
//! the benchmark itself (`--gateways`).

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use parley_client::{AdminClient, Client};
use rand::RngCore;

use crate::gateways::Gateways;
use crate::BenchArgs;

/// Random bytes of a generated admin token.
const ADMIN_TOKEN_BYTES: usize = 32;

#[derive(Clone)]
pub struct Target {
    /// Base URLs of the gateways; devices are spread over them round robin.
    pub urls: Vec<String>,
    pub admin_token: String,
    /// The gateways when the benchmark started them.
    pub gateways: Option<Arc<Gateways>>,
}

impl Target {
    /// The URLs of --url, or gateways started for --gateways.
    pub async fn resolve(args: &BenchArgs) -> Result<Target> {
        let Some(count) = args.gateways else {
            let Some(admin_token) = args.admin_token.clone() else {
                bail!("--admin-token (or PARLEY_ADMIN_TOKEN) is needed with --url");
            };
            if args.url.is_empty() {
                bail!("--url or --gateways is needed");
            }
            return Ok(Target {
                urls: args.url.clone(),
                admin_token,
                gateways: None,
            });
        };
        let admin_token = args.admin_token.clone().unwrap_or_else(generated_token);
        crate::progress::phase(&format!(
            "starting {count} gateways on --bus {}",
            args.bus.as_arg()
        ));
        let gateways = Gateways::start(args, count as usize, &admin_token)
            .await
            .context("starting the gateways")?;
        Ok(Target {
            urls: gateways.urls().to_vec(),
            admin_token,
            gateways: Some(Arc::new(gateways)),
        })
    }

    /// The first URL: where scenarios that use one server run.
    pub fn url(&self) -> &str {
        &self.urls[0]
    }

    /// An admin client of the first gateway.
    pub fn admin(&self) -> Result<AdminClient> {
        Ok(AdminClient::new(self.url(), &self.admin_token)?)
    }

    /// An admin client of each gateway, in the order of the URLs.
    pub fn admins(&self) -> Result<Vec<AdminClient>> {
        self.urls
            .iter()
            .map(|u| Ok(AdminClient::new(u, &self.admin_token)?))
            .collect()
    }

    /// Waits for nothing: fails unless every gateway answers `/readyz` now.
    pub async fn check_ready(&self) -> Result<()> {
        for url in &self.urls {
            Client::new(url, "")?
                .readyz()
                .await
                .with_context(|| format!("the server at {url} is not ready"))?;
        }
        Ok(())
    }

    /// Stops the gateways the benchmark started.
    pub async fn stop(&self) {
        if let Some(gateways) = &self.gateways {
            gateways.stop().await;
        }
    }
}

fn generated_token() -> String {
    let mut bytes = [0u8; ADMIN_TOKEN_BYTES];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
