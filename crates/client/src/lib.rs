//! A client of Flynn's gateway, typed by `flynn-api`: connect with a
//! token, [`call`](Client::call) a method, [`subscribe`](Client::subscribe),
//! [`follow`](Client::follow) one turn to its end, and reconnect with
//! [`Backoff`]. Errors are typed ([`Error`]): a refused token, an
//! unreachable daemon and each protocol error code are told apart without
//! reading their text.
//!
//! ```no_run
//! # async fn example() -> Result<(), flynn_client::Error> {
//! use flynn_api::{NoParams, methods::SessionsList};
//!
//! let url = flynn_client::rpc_url("http://127.0.0.1:18800").map_err(flynn_client::Error::Address)?;
//! let client = flynn_client::Client::connect(&url, Some("the token")).await?;
//! for session in client.call::<SessionsList>(&NoParams {}).await? {
//!     println!("{}", session.key);
//! }
//! # Ok(())
//! # }
//! ```

mod address;

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use flynn_api::{Method, Notification, SendParams, Subscription, codes, methods};
use flynn_protocol::AgentEvent;
use flynn_protocol::config::TokenScope;
use futures::Stream;
use jsonrpsee::client_transport::ws::WsHandshakeError;
use jsonrpsee::core::client::{ClientT, SubscriptionClientT};
use jsonrpsee::core::traits::ToRpcParams;
use jsonrpsee::ws_client::{HeaderMap, WsClient, WsClientBuilder};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;

pub use address::{client_token, mcp_url, rpc_url};

/// Why a call did not get its answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address a person gave is not one of the gateway's.
    #[error("{0}")]
    Address(String),
    /// The gateway refused the token (HTTP 401 or 403 on the upgrade).
    #[error(
        "the daemon refused the token (HTTP {status}): set FLYNN_GATEWAY_TOKEN, or run on the daemon's machine to use FLYNN_HOME/gateway.token"
    )]
    Unauthorized { status: u16 },
    /// Nothing answered, or the connection failed before the protocol.
    #[error("cannot reach the daemon at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// The daemon answered the call with a protocol error.
    #[error("{0}")]
    Rpc(RpcError),
    /// The connection closed before the answer.
    #[error("the connection to the daemon closed")]
    Closed,
    /// The answer is not the shape `flynn-api` declares.
    #[error("the daemon answered in a shape this client cannot read: {0}")]
    Decode(String),
}

/// An error the daemon answered with: the code (JSON-RPC's own or
/// [`codes`]), `data.kind` and the rest of `data`.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i32,
    pub message: String,
    /// `data.kind` (`forbidden`, `not_found`…), when the daemon sent one.
    pub kind: Option<String>,
    pub data: Option<Value>,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl RpcError {
    /// The turn was cancelled (by the client or another one).
    pub fn is_cancelled(&self) -> bool {
        self.code == codes::CANCELLED
    }

    /// The token may not do this; the scope that would, when one would.
    pub fn forbidden(&self) -> Option<Option<TokenScope>> {
        (self.code == codes::FORBIDDEN).then(|| {
            self.data
                .as_ref()
                .and_then(|data| data.get("scope"))
                .and_then(|scope| serde_json::from_value(scope.clone()).ok())
        })
    }

    /// How long to wait before trying again, for `rate_limited`.
    pub fn retry_after(&self) -> Option<Duration> {
        (self.code == codes::RATE_LIMITED).then(|| {
            let secs = self
                .data
                .as_ref()
                .and_then(|data| data.get("retry_after_secs"))
                .and_then(Value::as_u64)
                .unwrap_or(1);
            Duration::from_secs(secs)
        })
    }
}

impl Error {
    /// The protocol error, when the daemon answered with one.
    pub fn rpc(&self) -> Option<&RpcError> {
        match self {
            Error::Rpc(error) => Some(error),
            _ => None,
        }
    }

    fn from_call(error: jsonrpsee::core::client::Error) -> Error {
        use jsonrpsee::core::client::Error as E;
        match error {
            E::Call(call) => Error::Rpc(RpcError {
                code: call.code(),
                message: call.message().to_owned(),
                kind: call
                    .data()
                    .and_then(|data| serde_json::from_str::<Value>(data.get()).ok())
                    .and_then(|data| data.get("kind")?.as_str().map(str::to_owned)),
                data: call
                    .data()
                    .and_then(|data| serde_json::from_str(data.get()).ok()),
            }),
            E::ParseError(error) => Error::Decode(error.to_string()),
            E::RestartNeeded(_) | E::ServiceDisconnect => Error::Closed,
            other => Error::Decode(other.to_string()),
        }
    }
}

/// Parameters sent by name, as one object.
struct Named<'a, T>(&'a T);

impl<T: Serialize> ToRpcParams for Named<'_, T> {
    fn to_rpc_params(self) -> Result<Option<Box<RawValue>>, serde_json::Error> {
        serde_json::value::to_raw_value(self.0).map(Some)
    }
}

/// One connection to the gateway's `/rpc` WebSocket.
#[derive(Debug)]
pub struct Client {
    rpc: WsClient,
}

impl Client {
    /// Connects to `url` (`ws://host:port/rpc`, see [`rpc_url`]) with
    /// `token` as a bearer token.
    pub async fn connect(url: &str, token: Option<&str>) -> Result<Client, Error> {
        let mut headers = HeaderMap::new();
        if let Some(token) = token {
            let value = format!("Bearer {token}")
                .parse()
                .map_err(|_| Error::Address("the token holds characters a header cannot".into()))?;
            headers.insert("authorization", value);
        }
        let rpc = WsClientBuilder::default()
            .set_headers(headers)
            .connection_timeout(Duration::from_secs(5))
            .request_timeout(Duration::from_secs(3600))
            .build(url)
            .await
            .map_err(|error| refused(url, error))?;
        Ok(Client { rpc })
    }

    /// Calls method `M` and waits for its answer.
    pub async fn call<M: Method>(&self, params: &M::Params) -> Result<M::Output, Error> {
        self.rpc
            .request(M::NAME, Named(params))
            .await
            .map_err(Error::from_call)
    }

    /// Subscribes with `S`: its notifications until the stream is dropped
    /// (which unsubscribes) or the daemon ends it.
    pub async fn subscribe<S: Subscription>(
        &self,
        params: &S::Params,
    ) -> Result<Notifications<S::Item>, Error> {
        let inner = self
            .rpc
            .subscribe(S::NAME, Named(params), S::UNSUBSCRIBE)
            .await
            .map_err(Error::from_call)?;
        Ok(Notifications { inner })
    }

    /// Sends a message with `agent.send` and follows its turn: its events,
    /// ending after the last (a `run_state` of `complete`, `cancelled` or
    /// `error`, or a chat command's answer).
    pub async fn follow(&self, params: &SendParams) -> Result<Turn, Error> {
        let events = self.subscribe::<methods::AgentSend>(params).await?;
        Ok(Turn {
            events,
            ended: false,
        })
    }

    /// Whether the connection is still open.
    pub fn is_connected(&self) -> bool {
        self.rpc.is_connected()
    }

    /// Waits until the connection closes.
    pub async fn closed(&self) {
        let _ = self.rpc.on_disconnect().await;
    }
}

/// A refused connection: a rejected token, or nothing listening.
fn refused(url: &str, error: jsonrpsee::core::client::Error) -> Error {
    if let jsonrpsee::core::client::Error::Transport(transport) = &error
        && let Some(WsHandshakeError::Rejected { status_code }) =
            transport.downcast_ref::<WsHandshakeError>()
        && matches!(status_code, 401 | 403)
    {
        return Error::Unauthorized {
            status: *status_code,
        };
    }
    Error::Unreachable {
        url: url.to_owned(),
        reason: error.to_string(),
    }
}

/// A subscription's notifications, decoded.
pub struct Notifications<T> {
    inner: jsonrpsee::core::client::Subscription<T>,
}

impl<T> std::fmt::Debug for Notifications<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifications").finish_non_exhaustive()
    }
}

impl<T: DeserializeOwned> Stream for Notifications<T> {
    type Item = Result<T, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.inner)
            .poll_next(cx)
            .map(|item| item.map(|item| item.map_err(|e| Error::Decode(e.to_string()))))
    }
}

/// One turn's notifications, from `agent.send` to the turn's end.
#[derive(Debug)]
pub struct Turn {
    events: Notifications<Notification>,
    ended: bool,
}

impl Turn {
    /// Whether `event` is a turn's last.
    pub fn is_last(event: &AgentEvent, turn_less: bool) -> bool {
        match event {
            AgentEvent::RunState { state } => state.is_terminal(),
            AgentEvent::Command { .. } => turn_less,
            _ => false,
        }
    }
}

impl Stream for Turn {
    type Item = Result<Notification, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let next = Pin::new(&mut self.events).poll_next(cx);
        if let Poll::Ready(Some(Ok(Notification::Event(envelope)))) = &next
            && Turn::is_last(&envelope.event, envelope.turn.is_none())
        {
            self.ended = true;
        }
        next
    }
}

/// Waits between attempts to reconnect: from `first`, doubling up to
/// `max`; [`reset`](Backoff::reset) after a connection held.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_millis(300), Duration::from_secs(5))
    }
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Self {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// The wait before the next attempt (and doubles the one after).
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }

    pub fn reset(&mut self) {
        self.next = self.first;
    }

    /// Connects, waiting by this backoff between attempts; `failed` hears
    /// each failure (a refused token is told, and retried: the daemon may
    /// be given the right one).
    pub async fn connect(
        &mut self,
        url: &str,
        token: Option<&str>,
        mut failed: impl FnMut(&Error),
    ) -> Client {
        loop {
            match Client::connect(url, token).await {
                Ok(client) => {
                    self.reset();
                    return client;
                }
                Err(error) => {
                    failed(&error);
                    tokio::time::sleep(self.next_wait()).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_to_its_cap_and_starts_over_after_a_reset() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let waits: Vec<u128> = (0..4).map(|_| backoff.next_wait().as_millis()).collect();
        assert_eq!(waits, [100, 200, 350, 350]);
        backoff.reset();
        assert_eq!(backoff.next_wait(), Duration::from_millis(100));
    }

    #[test]
    fn rpc_errors_are_read_by_code_not_text() {
        let error = RpcError {
            code: codes::FORBIDDEN,
            message: "anything".into(),
            kind: Some("forbidden".into()),
            data: Some(serde_json::json!({"kind": "forbidden", "scope": "admin"})),
        };
        assert_eq!(error.forbidden(), Some(Some(TokenScope::Admin)));
        assert!(!error.is_cancelled());
        let limited = RpcError {
            code: codes::RATE_LIMITED,
            message: String::new(),
            kind: None,
            data: Some(serde_json::json!({"retry_after_secs": 7})),
        };
        assert_eq!(limited.retry_after(), Some(Duration::from_secs(7)));
    }
}
