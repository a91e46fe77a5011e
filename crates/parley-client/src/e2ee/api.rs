//! The server's key-package directory and MLS write (docs/E2EE.md), as calls of a device
//! [`Client`]. The MLS write carries its own request key, so an unknown outcome is resent
//! within the client's retry policy like a send.

use parley_wire::{ClaimedKeyPackages, KeyPackageCount, KeyPackageUpload, MlsAck, MlsPost};
use reqwest::Method;

use crate::client::Client;
use crate::error::ClientError;

impl Client {
    /// `POST /v1/devices/me/key-packages`: stores a batch of this device's key packages and,
    /// optionally, replaces its last-resort one.
    pub async fn upload_key_packages(
        &self,
        upload: &KeyPackageUpload,
    ) -> Result<KeyPackageCount, ClientError> {
        let url = self.http().url(&["v1", "devices", "me", "key-packages"])?;
        let request = self.http().authorised(Method::POST, url).json(upload);
        self.http().json(request).await
    }

    /// `GET /v1/devices/me/key-packages`: how many of this device's packages are left.
    pub async fn key_package_count(&self) -> Result<KeyPackageCount, ClientError> {
        let url = self.http().url(&["v1", "devices", "me", "key-packages"])?;
        self.http()
            .json(self.http().authorised(Method::GET, url))
            .await
    }

    /// `POST /v1/users/{user_id}/key-packages/claim`: one package for each device of the user
    /// that has one; each ordinary package is handed out once.
    pub async fn claim_key_packages(
        &self,
        user_id: &str,
    ) -> Result<ClaimedKeyPackages, ClientError> {
        let url = self
            .http()
            .url(&["v1", "users", user_id, "key-packages", "claim"])?;
        self.http()
            .json(self.http().authorised(Method::POST, url))
            .await
    }

    /// One attempt of `POST /v1/conversations/{conv_id}/mls`.
    pub async fn post_mls(&self, conv_id: &str, post: &MlsPost) -> Result<MlsAck, ClientError> {
        let url = self.conv_url(conv_id, &["mls"])?;
        let request = self.http().authorised(Method::POST, url).json(post);
        self.http().json(request).await
    }

    /// [`Client::post_mls`], resent with the same request within the client's retry policy
    /// after an unknown outcome.
    pub async fn post_mls_with_retry(
        &self,
        conv_id: &str,
        post: &MlsPost,
    ) -> Result<MlsAck, ClientError> {
        self.retry_policy()
            .run(|| self.post_mls(conv_id, post))
            .await
    }
}
