//! Why one attempt failed, as the call loop and the statistics both see it.

/// Why one attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttemptError {
    /// Connecting, sending, or the connection closed before a response.
    #[error("transport: {0}")]
    Transport(String),
    /// The attempt ran out of the call's budget.
    #[error("timed out")]
    Timeout,
    /// The server answered with a non-2xx status.
    #[error("HTTP {status}: {message}")]
    Status {
        /// The status code.
        status: u16,
        /// The server's error text (at most 200 characters).
        message: String,
    },
    /// The response body broke off (truncated, reset).
    #[error("response body: {0}")]
    Body(String),
    /// The body was not the protocol's JSON.
    #[error("malformed response: {0}")]
    Malformed(String),
    /// The body did not hold the expected tensor.
    #[error("unexpected response: {0}")]
    Shape(String),
    /// The body was larger than `max_response_bytes` (the limit).
    #[error("response body over {0} bytes (max_response_kb)")]
    TooLarge(usize),
}

impl AttemptError {
    /// Whether another attempt could succeed: not for a 4xx other than 408 and 429 (the
    /// same request fails again) nor for a response the model itself shaped wrong.
    pub fn retryable(&self) -> bool {
        match self {
            AttemptError::Status { status, .. } => {
                *status >= 500 || *status == 408 || *status == 429
            }
            AttemptError::Shape(_) | AttemptError::TooLarge(_) => false,
            _ => true,
        }
    }

    pub(crate) fn from_reqwest(e: reqwest::Error) -> Self {
        if e.is_timeout() {
            AttemptError::Timeout
        } else if e.is_body() || e.is_decode() {
            AttemptError::Body(chain(&e))
        } else {
            AttemptError::Transport(chain(&e))
        }
    }
}

/// An error with its sources (reqwest's own text is only "error sending request").
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}
