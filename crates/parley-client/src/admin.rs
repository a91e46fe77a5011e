//! The admin client: users and devices, authenticated by the deployment's admin token.

use reqwest::Method;

use crate::client::Client;
use crate::error::ClientError;
use crate::http::{ClientOptions, Http};
use crate::raw::RawRequest;
use crate::request::{NewDevice, NewUser};
use crate::types::{DeviceToken, User};

#[derive(Debug, Clone)]
pub struct AdminClient {
    http: Http,
}

impl AdminClient {
    pub fn new(base_url: &str, admin_token: &str) -> Result<Self, ClientError> {
        Self::with_options(base_url, admin_token, ClientOptions::default())
    }

    pub fn with_options(
        base_url: &str,
        admin_token: &str,
        options: ClientOptions,
    ) -> Result<Self, ClientError> {
        Ok(Self {
            http: Http::new(base_url, admin_token, &options)?,
        })
    }

    /// A request outside the typed API, carrying the admin token unless told otherwise.
    pub fn raw(&self, method: Method, path_and_query: &str) -> RawRequest {
        RawRequest::new(&self.http, method, path_and_query)
    }

    /// A device client for `token` that shares this client's server and connection pool.
    pub fn device_client(&self, token: &str) -> Client {
        Client::from_http(self.http.with_token(token))
    }

    /// Creates a user; an existing one answers `409 ALREADY_EXISTS`.
    pub async fn create_user(
        &self,
        user_id: &str,
        display_name: Option<&str>,
    ) -> Result<User, ClientError> {
        let url = self.http.url(&["v1", "admin", "users"])?;
        let request = self.http.authorised(Method::POST, url).json(&NewUser {
            user_id,
            display_name,
        });
        self.http.json(request).await
    }

    /// Issues a token for the device, creating the device or revoking its previous token.
    /// Returns the token, which the server shows only this once.
    pub async fn create_device(
        &self,
        user_id: &str,
        device_id: &str,
    ) -> Result<String, ClientError> {
        let url = self
            .http
            .url(&["v1", "admin", "users", user_id, "devices"])?;
        let request = self
            .http
            .authorised(Method::POST, url)
            .json(&NewDevice { device_id });
        let issued: DeviceToken = self.http.json(request).await?;
        Ok(issued.token)
    }

    /// Revokes the device's token at once.
    pub async fn revoke_device(&self, user_id: &str, device_id: &str) -> Result<(), ClientError> {
        let url = self
            .http
            .url(&["v1", "admin", "users", user_id, "devices", device_id])?;
        self.http
            .ok(self.http.authorised(Method::DELETE, url))
            .await
    }
}
