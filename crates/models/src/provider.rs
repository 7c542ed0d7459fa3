use std::sync::Arc;

use flynn_protocol::config::ProviderConfig;

use crate::{Error, ModelClient, Result};

/// Builds the client for one configured provider.
pub fn build_client(name: &str, config: &ProviderConfig) -> Result<Arc<dyn ModelClient>> {
    Err(Error::Config {
        message: format!("provider '{name}' ({}): not implemented yet", config.kind),
    })
}
