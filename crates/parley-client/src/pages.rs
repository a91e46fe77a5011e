//! Reading a whole conversation: the events-after pages from a cursor up to the head, as a
//! stream of pages or of events, or collected.

use futures::stream::{self, Stream, StreamExt, TryStreamExt};

use crate::client::Client;
use crate::cursor::Progress;
use crate::error::ClientError;
use crate::sync::EVENTS_PAGE_LEN_MAX;
use crate::types::{Event, EventsPage};

impl Client {
    /// The visible events with `seq > after`, page by page ([`EVENTS_PAGE_LEN_MAX`] events at
    /// most each), until a page reaches the head it reports. Each page continues from the
    /// previous one's `through_seq` in the first page's epoch, so a log rebuilt meanwhile ends
    /// the stream with `EPOCH_CHANGED` rather than mixing two epochs; a page that makes no
    /// progress ends it too. The stream ends after its first error.
    pub fn event_pages<'a>(
        &'a self,
        conv_id: &'a str,
        after: i64,
    ) -> impl Stream<Item = Result<EventsPage, ClientError>> + Send + 'a {
        stream::try_unfold(Some((after, None)), move |from| async move {
            let Some((after, epoch)) = from else {
                return Ok(None);
            };
            let page = self
                .events_after(conv_id, after, Some(EVENTS_PAGE_LEN_MAX), epoch)
                .await?;
            let next = match Progress::of(after, page.through_seq, page.head) {
                Progress::More => Some((page.through_seq, Some(page.epoch))),
                Progress::Done | Progress::Stuck => None,
            };
            Ok(Some((page, next)))
        })
    }

    /// The visible events with `seq > after`, one by one, read page by page as
    /// [`Client::event_pages`] reads them.
    pub fn events_from<'a>(
        &'a self,
        conv_id: &'a str,
        after: i64,
    ) -> impl Stream<Item = Result<Event, ClientError>> + Send + 'a {
        self.event_pages(conv_id, after)
            .map_ok(|page| stream::iter(page.events).map(Ok))
            .try_flatten()
    }

    /// Every event of the conversation the caller can see, ascending. The whole log is held in
    /// memory; for a long one, read [`Client::events_from`] instead.
    pub async fn all_events(&self, conv_id: &str) -> Result<Vec<Event>, ClientError> {
        self.events_from(conv_id, 0).try_collect().await
    }
}
