//! One Redis server or a Redis Cluster, behind the same calls: a pipeline of commands and
//! a single query. Every script touches one key (its `KEYS[1]`), so each command of a
//! decision's pipeline is routed to the node that owns its key's slot; nothing is
//! cross-slot. Timeouts bound every socket read and write (single node) or every
//! connection and response (cluster).

use super::def::RedisConfig;
use redis::{Cmd, FromRedisValue, RedisResult, Value};
use std::time::Duration;

/// A client for `cfg` (`cluster` nodes when given, else `url`).
#[derive(Clone)]
pub(crate) enum Client {
    One(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

/// A connection of a [`Client`].
pub(crate) enum Conn {
    One(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Client {
    /// A client whose calls are bounded by `timeout`.
    pub fn open(cfg: &RedisConfig, timeout: Duration) -> Result<Self, String> {
        if cfg.cluster.is_empty() {
            return redis::Client::open(cfg.url.as_str())
                .map(Client::One)
                .map_err(|e| format!("state.redis.url: {e}"));
        }
        redis::cluster::ClusterClient::builder(cfg.cluster.iter().map(String::as_str))
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .build()
            .map(Client::Cluster)
            .map_err(|e| format!("state.redis.cluster: {e}"))
    }

    /// A new connection, every read and write bounded by `timeout`.
    pub fn connect(&self, timeout: Duration) -> RedisResult<Conn> {
        match self {
            Client::One(c) => {
                let con = c.get_connection_with_timeout(timeout)?;
                con.set_read_timeout(Some(timeout))?;
                con.set_write_timeout(Some(timeout))?;
                Ok(Conn::One(con))
            }
            Client::Cluster(c) => Ok(Conn::Cluster(Box::new(c.get_connection()?))),
        }
    }
}

impl Conn {
    /// Runs `cmds` as one pipeline; their replies in order.
    pub fn pipeline(&mut self, cmds: &[Cmd]) -> RedisResult<Vec<Value>> {
        match self {
            Conn::One(con) => {
                let mut p = redis::pipe();
                for c in cmds {
                    p.add_command(c.clone());
                }
                p.query(con)
            }
            Conn::Cluster(con) => {
                let mut p = redis::cluster::cluster_pipe();
                for c in cmds {
                    p.add_command(c.clone());
                }
                p.query(con)
            }
        }
    }

    /// One command.
    pub fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Conn::One(con) => cmd.query(con),
            Conn::Cluster(con) => cmd.query(con.as_mut()),
        }
    }
}
