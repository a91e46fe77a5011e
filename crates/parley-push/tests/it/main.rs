//! The test push service against requests built by this crate and sent with reqwest, as the
//! server sends them.

mod gateway;
mod web_push;

use parley_push::PreparedPush;

/// Sends `push` as the server does, answering the status and the body.
async fn send(push: &PreparedPush) -> (u16, Vec<u8>) {
    let client = reqwest::Client::new();
    let mut request = client.post(&push.url).body(push.body.clone());
    for (name, value) in &push.headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.expect("the test push service answers");
    let status = response.status().as_u16();
    let body = response.bytes().await.expect("a body").to_vec();
    (status, body)
}

/// The wall clock in Unix seconds, as the server passes it.
fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}
