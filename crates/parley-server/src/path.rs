//! Path parameters, validated in the handler rather than by the router.
//!
//! A path extractor that fails would answer 400 before authentication and before the body
//! limits, against SPEC §6's precedence (401, 413, 400, …). So the raw segments are captured
//! without failing and turned into domain ids only when the handler reaches the 400 stage.
//! An id that is well-formed but names no conversation is left to the store, which answers it
//! exactly like a conversation the caller never joined (P10).

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use parley_domain::{ConvId, DeviceId, UserId};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::error::ApiError;
use crate::request::fields::seq;
pub use crate::request::fields::{conv_id, device_id, group_conv_id, user_id};

/// Path parameters of type `T`, or the 400 to answer once the handler gets that far.
pub struct DeferredPath<T>(Result<T, ApiError>);

impl<T> DeferredPath<T> {
    pub fn into_inner(self) -> Result<T, ApiError> {
        self.0
    }
}

impl<T, S> FromRequestParts<S> for DeferredPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let parsed = Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| t)
            .map_err(|e| ApiError::bad_request(format!("invalid path: {}", e.body_text())));
        Ok(Self(parsed))
    }
}

/// `/v1/conversations/{conv_id}/…`
#[derive(Debug, Deserialize)]
pub struct ConvPath {
    pub conv_id: String,
}

impl ConvPath {
    pub fn conv_id(&self) -> Result<ConvId, ApiError> {
        conv_id(&self.conv_id)
    }
}

/// `/v1/conversations/{conv_id}/members/{user_id}`
#[derive(Debug, Deserialize)]
pub struct ConvMemberPath {
    pub conv_id: String,
    pub user_id: String,
}

impl ConvMemberPath {
    pub fn ids(&self) -> Result<(ConvId, UserId), ApiError> {
        Ok((conv_id(&self.conv_id)?, user_id(&self.user_id)?))
    }
}

/// `/v1/conversations/{conv_id}/events/{seq}/…`
#[derive(Debug, Deserialize)]
pub struct ConvSeqPath {
    pub conv_id: String,
    pub seq: String,
}

impl ConvSeqPath {
    pub fn ids(&self) -> Result<(ConvId, i64), ApiError> {
        Ok((conv_id(&self.conv_id)?, seq(&self.seq)?))
    }
}

/// `/v1/conversations/{conv_id}/events/{seq}/reactions/{key}`; the key is checked by the
/// request (`fields::reaction_key`).
#[derive(Debug, Deserialize)]
pub struct ConvSeqKeyPath {
    pub conv_id: String,
    pub seq: String,
    pub key: String,
}

impl ConvSeqKeyPath {
    pub fn ids(&self) -> Result<(ConvId, i64), ApiError> {
        Ok((conv_id(&self.conv_id)?, seq(&self.seq)?))
    }
}

/// `/v1/admin/users/{user_id}/…`
#[derive(Debug, Deserialize)]
pub struct UserPath {
    pub user_id: String,
}

impl UserPath {
    pub fn user_id(&self) -> Result<UserId, ApiError> {
        user_id(&self.user_id)
    }
}

/// `/v1/admin/users/{user_id}/devices/{device_id}`
#[derive(Debug, Deserialize)]
pub struct UserDevicePath {
    pub user_id: String,
    pub device_id: String,
}

impl UserDevicePath {
    pub fn ids(&self) -> Result<(UserId, DeviceId), ApiError> {
        Ok((user_id(&self.user_id)?, device_id(&self.device_id)?))
    }
}

/// `/v1/media/{media_id}/…`
#[derive(Debug, Deserialize)]
pub struct MediaPath {
    pub media_id: String,
}
