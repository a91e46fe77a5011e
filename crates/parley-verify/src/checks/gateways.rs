//! The gateways listing (chapter 10).

use parley_client::Method;

use super::Observed;
use crate::context::Ctx;
use crate::error::ensure;

/// `GET /v1/admin/gateways` lists every live gateway once, sorted by id, this node's included.
pub async fn gateway_listing_is_sorted(ctx: &Ctx) -> Observed {
    let r = ctx
        .target
        .admin
        .raw(Method::GET, "/v1/admin/gateways")
        .response()
        .await?;
    ctx.note(format!("GET /v1/admin/gateways → {} {}", r.status, r.text));
    ensure!(r.status == 200, "{} {}", r.status, r.text);
    let ids: Vec<String> = r.json["gateways"]
        .as_array()
        .map(|gs| {
            gs.iter()
                .filter_map(|g| g["gateway_id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    ensure!(ids == sorted, "not sorted or repeated: {ids:?}");
    let own = ctx.target.server["gateway_id"].as_str().unwrap_or_default();
    ensure!(ids.iter().any(|i| i == own), "{own} is not listed: {ids:?}");
    Ok(format!("{} gateways, sorted, {own} among them", ids.len()))
}
