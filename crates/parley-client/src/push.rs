//! Offline notifications (docs/PUSH.md): the device's push registration, the VAPID key a
//! browser subscribes with, per-conversation levels and the privacy setting. A native app
//! registers a push-gateway target; a browser its Web Push subscription.

use parley_wire::{
    NotificationLevel, NotificationSettings, PushRegistration, PushTargetInfo, VapidPublicKey,
    WebPushKeys,
};
use reqwest::Method;

use crate::error::ClientError;
use crate::Client;

impl Client {
    /// The deployment's VAPID public key (`applicationServerKey`), base64url.
    pub async fn vapid_key(&self) -> Result<String, ClientError> {
        let url = self.http().url(&["v1", "push", "vapid"])?;
        let answer: VapidPublicKey = self
            .http()
            .json(self.http().authorised(Method::GET, url))
            .await?;
        Ok(answer.public_key)
    }

    /// Registers this device's Web Push subscription, replacing any earlier target.
    pub async fn register_web_push(
        &self,
        endpoint: &str,
        p256dh: &str,
        auth: &str,
    ) -> Result<PushTargetInfo, ClientError> {
        self.register_push(&PushRegistration {
            endpoint: Some(endpoint.to_owned()),
            keys: Some(WebPushKeys {
                p256dh: p256dh.to_owned(),
                auth: auth.to_owned(),
            }),
            ..PushRegistration::default()
        })
        .await
    }

    /// Registers this device with a push gateway (the Matrix model), replacing any earlier
    /// target.
    pub async fn register_push_gateway(
        &self,
        url: &str,
        pushkey: &str,
        app_id: &str,
    ) -> Result<PushTargetInfo, ClientError> {
        self.register_push(&PushRegistration {
            url: Some(url.to_owned()),
            pushkey: Some(pushkey.to_owned()),
            app_id: Some(app_id.to_owned()),
            ..PushRegistration::default()
        })
        .await
    }

    /// `PUT /v1/devices/me/push` with `registration` as it is.
    pub async fn register_push(
        &self,
        registration: &PushRegistration,
    ) -> Result<PushTargetInfo, ClientError> {
        let url = self.http().url(&["v1", "devices", "me", "push"])?;
        let request = self.http().authorised(Method::PUT, url).json(registration);
        self.http().json(request).await
    }

    /// This device's push target; `None` when it has none.
    pub async fn push_target(&self) -> Result<Option<PushTargetInfo>, ClientError> {
        let url = self.http().url(&["v1", "devices", "me", "push"])?;
        match self
            .http()
            .json(self.http().authorised(Method::GET, url))
            .await
        {
            Ok(info) => Ok(Some(info)),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes this device's push target (a logout does too).
    pub async fn unregister_push(&self) -> Result<(), ClientError> {
        let url = self.http().url(&["v1", "devices", "me", "push"])?;
        self.http()
            .ok(self.http().authorised(Method::DELETE, url))
            .await
    }

    /// Sets the caller's level of the conversation: `all`, `mentions` or `none`.
    pub async fn set_notification_level(
        &self,
        conv_id: &str,
        level: &str,
    ) -> Result<String, ClientError> {
        let url = self.conv_url(conv_id, &["notifications"])?;
        let body = NotificationLevel {
            level: level.to_owned(),
        };
        let request = self.http().authorised(Method::PUT, url).json(&body);
        let answer: NotificationLevel = self.http().json(request).await?;
        Ok(answer.level)
    }

    /// The caller's level of the conversation.
    pub async fn notification_level(&self, conv_id: &str) -> Result<String, ClientError> {
        let url = self.conv_url(conv_id, &["notifications"])?;
        let answer: NotificationLevel = self
            .http()
            .json(self.http().authorised(Method::GET, url))
            .await?;
        Ok(answer.level)
    }

    /// Sets whether the caller's notifications leave out sender, preview and title.
    pub async fn set_notification_privacy(&self, privacy: bool) -> Result<bool, ClientError> {
        let url = self.http().url(&["v1", "me", "notifications"])?;
        let request = self
            .http()
            .authorised(Method::PUT, url)
            .json(&NotificationSettings { privacy });
        let answer: NotificationSettings = self.http().json(request).await?;
        Ok(answer.privacy)
    }
}
