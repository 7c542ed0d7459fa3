//! The per-provider circuit breaker: a provider that keeps failing is
//! skipped for a while instead of making every call wait for it.
//!
//! Closed: calls go through; each infrastructure failure adds one to the
//! count, anything that shows the server answering resets it. At
//! `failure_threshold` failures in a row the circuit opens: calls are
//! skipped until `cooldown_secs` have passed. Then it is half-open: one
//! trial call goes through while the others are still skipped; its success
//! closes the circuit, its failure opens it for another cooldown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use flynn_protocol::config::CircuitBreakerConfig;
use tokio::time::Instant;

use crate::Error;

/// What one call says about its provider's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// The server answered: a complete answer, or a refusal that is about
    /// the request or the key (auth, invalid request, context overflow).
    Up,
    /// An infrastructure failure: rate limited, overloaded, 5xx, no
    /// connection, timeout, a broken or cut-off stream.
    Down,
    /// Says nothing about the server: no request was sent (missing key,
    /// config), the caller went away, or the answer was malformed.
    Unknown,
}

impl Health {
    pub fn of(error: &Error) -> Health {
        match error {
            Error::RateLimited { .. }
            | Error::Overloaded { .. }
            | Error::Server { .. }
            | Error::Connect { .. }
            | Error::Timeout { .. }
            | Error::Stream { .. } => Health::Down,
            Error::Auth { .. }
            | Error::InvalidRequest { .. }
            | Error::ContextOverflow { .. }
            | Error::Redirect { .. } => Health::Up,
            Error::MissingApiKey { .. }
            | Error::Protocol { .. }
            | Error::Config { .. }
            | Error::CircuitOpen { .. }
            | Error::AllFailed { .. } => Health::Unknown,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    /// Skipped until then.
    Open {
        until: Instant,
    },
    /// Half-open, with its one trial call under way.
    Trial,
}

#[derive(Debug, Clone, Copy)]
struct Circuit {
    /// Infrastructure failures in a row.
    failures: u32,
    state: State,
}

impl Default for Circuit {
    fn default() -> Self {
        Circuit {
            failures: 0,
            state: State::Closed,
        }
    }
}

/// The circuits of every provider of one router, shared by all its calls.
/// The lock is held only to read or update one circuit, never across an
/// `.await`.
#[derive(Debug)]
pub(crate) struct Breakers {
    /// 0 turns the breaker off.
    threshold: u32,
    cooldown: Duration,
    circuits: Mutex<HashMap<String, Circuit>>,
}

impl Breakers {
    pub fn new<'a>(
        config: &CircuitBreakerConfig,
        providers: impl IntoIterator<Item = &'a String>,
    ) -> Self {
        Breakers {
            threshold: config.failure_threshold,
            cooldown: Duration::from_secs(config.cooldown_secs),
            circuits: Mutex::new(
                providers
                    .into_iter()
                    .map(|name| (name.clone(), Circuit::default()))
                    .collect(),
            ),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Circuit>> {
        // A panic while holding the lock leaves the map consistent: every
        // update is a single assignment.
        flynn_protocol::sync::lock(&self.circuits)
    }

    /// Lets a call to `provider` through, or says why it is skipped
    /// ([`Error::CircuitOpen`]).
    pub fn admit(self: &Arc<Self>, provider: &str) -> Result<Permit, Error> {
        let now = Instant::now();
        let mut circuits = self.lock();
        let circuit = match circuits.get_mut(provider) {
            Some(circuit) => circuit,
            None => circuits.entry(provider.to_owned()).or_default(),
        };
        let trial = match circuit.state {
            State::Closed => false,
            State::Open { until } if now < until => {
                return Err(Error::CircuitOpen {
                    provider: provider.to_owned(),
                    failures: circuit.failures,
                    retry_in: Some(until - now),
                });
            }
            State::Open { .. } => {
                circuit.state = State::Trial;
                true
            }
            State::Trial => {
                return Err(Error::CircuitOpen {
                    provider: provider.to_owned(),
                    failures: circuit.failures,
                    retry_in: None,
                });
            }
        };
        drop(circuits);
        if trial {
            tracing::info!(
                provider,
                "circuit half-open: letting one trial call through"
            );
        }
        Ok(Permit {
            breakers: Arc::clone(self),
            provider: provider.to_owned(),
            trial,
            settled: false,
        })
    }

    fn record(&self, provider: &str, trial: bool, health: Health) {
        let now = Instant::now();
        let mut circuits = self.lock();
        let Some(circuit) = circuits.get_mut(provider) else {
            return;
        };
        match health {
            Health::Up => {
                if circuit.state != State::Closed {
                    tracing::info!(provider, "circuit closed: the provider answers again");
                }
                *circuit = Circuit::default();
            }
            Health::Down => {
                circuit.failures = circuit.failures.saturating_add(1);
                let opens = self.threshold > 0
                    && (trial
                        || (circuit.state == State::Closed && circuit.failures >= self.threshold));
                if opens {
                    circuit.state = State::Open {
                        until: now + self.cooldown,
                    };
                    tracing::warn!(
                        provider,
                        failures = circuit.failures,
                        cooldown_secs = self.cooldown.as_secs(),
                        "circuit open: skipping the provider"
                    );
                }
            }
            Health::Unknown => {
                // A trial that proved nothing hands its turn to the next call.
                if trial && circuit.state == State::Trial {
                    circuit.state = State::Open { until: now };
                }
            }
        }
    }
}

/// One call let through. Record what it showed with [`Permit::settle`];
/// dropping it unsettled (the caller went away) counts as
/// [`Health::Unknown`], so an abandoned trial does not block the provider.
#[derive(Debug)]
pub(crate) struct Permit {
    breakers: Arc<Breakers>,
    provider: String,
    trial: bool,
    settled: bool,
}

impl Permit {
    pub fn settle(mut self, health: Health) {
        self.settled = true;
        self.breakers.record(&self.provider, self.trial, health);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.settled {
            self.breakers
                .record(&self.provider, self.trial, Health::Unknown);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breakers(threshold: u32, cooldown_secs: u64) -> Arc<Breakers> {
        let names = ["a".to_owned(), "b".to_owned()];
        Arc::new(Breakers::new(
            &CircuitBreakerConfig {
                failure_threshold: threshold,
                cooldown_secs,
            },
            &names,
        ))
    }

    /// `Ok(trial)` or the skip's `retry_in`.
    fn try_admit(b: &Arc<Breakers>, provider: &str) -> Result<bool, Option<Duration>> {
        match b.admit(provider) {
            Ok(permit) => {
                let trial = permit.trial;
                // Leave the state as it is for the caller to inspect.
                std::mem::forget(permit);
                Ok(trial)
            }
            Err(Error::CircuitOpen { retry_in, .. }) => Err(retry_in),
            Err(other) => panic!("unexpected {other:?}"),
        }
    }

    fn fail(b: &Arc<Breakers>, provider: &str) {
        b.admit(provider).unwrap().settle(Health::Down);
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_the_threshold_then_lets_one_trial_through() {
        let b = breakers(3, 30);
        fail(&b, "a");
        fail(&b, "a");
        assert_eq!(try_admit(&b, "a"), Ok(false));
        fail(&b, "a");
        assert_eq!(try_admit(&b, "a"), Err(Some(Duration::from_secs(30))));
        // Other providers are not affected.
        assert_eq!(try_admit(&b, "b"), Ok(false));

        tokio::time::advance(Duration::from_secs(12)).await;
        assert_eq!(try_admit(&b, "a"), Err(Some(Duration::from_secs(18))));
        tokio::time::advance(Duration::from_secs(18)).await;
        let trial = b.admit("a").unwrap();
        assert!(trial.trial);
        // While the trial runs, everyone else is still skipped.
        assert_eq!(try_admit(&b, "a"), Err(None));
        // A failed trial opens the circuit for another cooldown.
        trial.settle(Health::Down);
        assert_eq!(try_admit(&b, "a"), Err(Some(Duration::from_secs(30))));
        tokio::time::advance(Duration::from_secs(30)).await;
        b.admit("a").unwrap().settle(Health::Up);
        assert_eq!(try_admit(&b, "a"), Ok(false));
        // Closed again, with the count back at zero.
        fail(&b, "a");
        fail(&b, "a");
        assert_eq!(try_admit(&b, "a"), Ok(false));
    }

    #[tokio::test(start_paused = true)]
    async fn answers_reset_the_count_and_unknowns_leave_it() {
        let b = breakers(2, 30);
        fail(&b, "a");
        b.admit("a").unwrap().settle(Health::Up);
        fail(&b, "a");
        b.admit("a").unwrap().settle(Health::Unknown);
        assert_eq!(try_admit(&b, "a"), Ok(false));
        fail(&b, "a");
        assert_eq!(try_admit(&b, "a"), Err(Some(Duration::from_secs(30))));
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_trial_hands_over_to_the_next_call() {
        let b = breakers(1, 5);
        fail(&b, "a");
        tokio::time::advance(Duration::from_secs(5)).await;
        let trial = b.admit("a").unwrap();
        assert!(trial.trial);
        drop(trial);
        assert_eq!(try_admit(&b, "a"), Ok(true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_threshold_never_opens() {
        let b = breakers(0, 30);
        for _ in 0..10 {
            fail(&b, "a");
        }
        assert_eq!(try_admit(&b, "a"), Ok(false));
    }

    #[test]
    fn only_infrastructure_failures_count() {
        let p = || "p".to_owned();
        let errors = [
            Error::RateLimited {
                provider: p(),
                retry_after: None,
                message: String::new(),
            },
            Error::Overloaded {
                provider: p(),
                status: 529,
                retry_after: None,
                message: String::new(),
            },
            Error::Server {
                provider: p(),
                status: 500,
                message: String::new(),
            },
            Error::Connect {
                provider: p(),
                url: String::new(),
                message: String::new(),
            },
            Error::Timeout {
                provider: p(),
                after: Duration::from_secs(1),
            },
            Error::Stream {
                provider: p(),
                message: String::new(),
            },
            Error::Auth {
                provider: p(),
                status: 401,
                message: String::new(),
                env: None,
            },
            Error::InvalidRequest {
                provider: p(),
                status: 400,
                message: String::new(),
            },
            Error::ContextOverflow {
                provider: p(),
                message: String::new(),
            },
            Error::MissingApiKey {
                provider: p(),
                env: None,
            },
            Error::Protocol {
                provider: p(),
                message: String::new(),
            },
            Error::Config {
                message: String::new(),
            },
        ];
        use Health::{Down, Unknown, Up};
        assert_eq!(
            errors.iter().map(Health::of).collect::<Vec<_>>(),
            [
                Down, Down, Down, Down, Down, Down, Up, Up, Up, Unknown, Unknown, Unknown
            ]
        );
    }
}
